#!/usr/bin/env bash
# Regenerates shop.pb.go and shop_grpc.pb.go from shop.proto. Needs protoc
# (apt: protobuf-compiler, which ships google/protobuf/descriptor.proto) and
# the Go plugins protoc-gen-go and protoc-gen-go-grpc on PATH or in
# $(go env GOPATH)/bin. The floodgate annotations are imported from the
# library's proto directory (../../proto). Run from anywhere.
set -euo pipefail

here="$(cd "$(dirname "$0")" && pwd)"
examples="$(dirname "$here")"
export PATH="$(go env GOPATH)/bin:$PATH"

include=/usr/include
[ -f "$include/google/protobuf/descriptor.proto" ] || { echo "generate.sh: google/protobuf/descriptor.proto not found under $include" >&2; exit 1; }

cd "$examples"
protoc -I . -I ../proto -I "$include" \
	--go_out=. --go_opt=module=github.com/floodgate-go/floodgate/examples \
	--go-grpc_out=. --go-grpc_opt=module=github.com/floodgate-go/floodgate/examples \
	shoppb/shop.proto
echo "generated examples/shoppb"
