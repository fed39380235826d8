package main

import (
	"context"
	"net"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// TestFloorAnswersEveryDescriptor: over real gRPC on loopback, a call of
// n descriptors gets n OK statuses with a limit (what the benchmark's
// readiness probe checks), and more than the cap is an error, not a panic.
func TestFloorAnswersEveryDescriptor(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g := grpc.NewServer()
	rlsv3.RegisterRateLimitServiceServer(g, newFloor())
	go func() { _ = g.Serve(lis) }()
	defer g.Stop()
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	client := rlsv3.NewRateLimitServiceClient(conn)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req := func(n int) *rlsv3.RateLimitRequest {
		r := &rlsv3.RateLimitRequest{Domain: "bench"}
		for range n {
			r.Descriptors = append(r.Descriptors, &ratelimitv3.RateLimitDescriptor{Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: "user", Value: "u"}}})
		}
		return r
	}
	for _, n := range []int{1, 4, maxDescriptors} {
		resp, err := client.ShouldRateLimit(ctx, req(n))
		if err != nil {
			t.Fatalf("%d descriptors: %v", n, err)
		}
		if resp.OverallCode != rlsv3.RateLimitResponse_OK || len(resp.Statuses) != n {
			t.Fatalf("%d descriptors: overall %v with %d statuses", n, resp.OverallCode, len(resp.Statuses))
		}
		for _, st := range resp.Statuses {
			if st.Code != rlsv3.RateLimitResponse_OK || st.CurrentLimit == nil {
				t.Fatalf("%d descriptors: status %v", n, st)
			}
		}
	}
	if _, err := client.ShouldRateLimit(ctx, req(maxDescriptors+1)); err == nil {
		t.Fatalf("%d descriptors answered, want an error", maxDescriptors+1)
	}
}
