package guard_test

import (
	"context"
	"fmt"
	"net"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	_ "google.golang.org/grpc/balancer/weightedroundrobin" // registers weighted_round_robin

	"github.com/floodgate-go/floodgate/guard"
	"github.com/floodgate-go/floodgate/internal/testpb"
)

type echoServer struct{ testpb.UnimplementedEchoServer }

func (echoServer) Plain(_ context.Context, in *testpb.EchoRequest) (*testpb.EchoResponse, error) {
	return &testpb.EchoResponse{Message: in.GetMessage()}, nil
}

// A server telling its clients' balancers how loaded it is (ORCA), and a
// client weighting its replicas by what they report.
func ExampleWithLoadReports() {
	g, err := guard.New(context.Background(),
		guard.WithPolicy([]byte("rules: []\nshedder: {capacity: 100}\n")),
		guard.WithInProcess(),
		guard.WithLoadReports(),
	)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer g.Close(context.Background())

	srv := grpc.NewServer(g.ServerOptions()...) // every call's trailer carries the report
	testpb.RegisterEchoServer(srv, echoServer{})
	if err := g.RegisterLoadReports(srv); err != nil { // and clients may ask for it out of band
		fmt.Println(err)
		return
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fmt.Println(err)
		return
	}
	go srv.Serve(ln) //nolint:errcheck // ends at Stop
	defer srv.Stop()

	// The client: weighted_round_robin reads the per-call reports (or,
	// with "enableOobLoadReport": true, the out-of-band stream).
	conn, err := grpc.NewClient("passthrough:///"+ln.Addr().String(),
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultServiceConfig(`{"loadBalancingConfig": [{"weighted_round_robin": {}}]}`),
	)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer conn.Close()
	client := testpb.NewEchoClient(conn)
	for range 3 {
		if _, err := client.Plain(context.Background(), &testpb.EchoRequest{Message: "hi"}); err != nil {
			fmt.Println(err)
			return
		}
	}

	// What the clients are told: the window so far (each arrival saw no
	// other call in flight of the shedder's 100), or the last one closed.
	r := g.LoadReport()
	fmt.Printf("utilization %.2f, bound by the %s; %d calls reported\n", r.Utilization, r.Stage, int(r.QPS*r.Window.Seconds()+0.5))
	// Output:
	// utilization 0.00, bound by the shedder; 3 calls reported
}
