module github.com/floodgate-go/floodgate/connectmw

go 1.26.0

replace github.com/floodgate-go/floodgate => ../

require (
	connectrpc.com/connect v1.19.1
	github.com/floodgate-go/floodgate v0.0.0-00010101000000-000000000000
	google.golang.org/genproto/googleapis/rpc v0.0.0-20261019180522-ce908d29299b
	google.golang.org/grpc v1.85.0
	google.golang.org/protobuf v1.36.12
)

require (
	go.yaml.in/yaml/v3 v3.0.6 // indirect
	golang.org/x/net v0.60.0 // indirect
	golang.org/x/sys v0.48.0 // indirect
	golang.org/x/text v0.42.0 // indirect
)
