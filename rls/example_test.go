package rls_test

import (
	"context"
	"fmt"
	"net"
	"time"

	extrlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/floodgate-go/floodgate/rls"
	"github.com/floodgate-go/floodgate/testing/clock"
	"github.com/floodgate-go/floodgate/tiers"
	"github.com/floodgate-go/floodgate/tiers/memstore"
)

// A policy whose per-client rule the services use, mapped for Envoy's
// remote_address descriptor: the edge and the services share the bucket.
func Example() {
	policy, err := tiers.Load([]byte(`
rules:
  - {name: per-client, key: [ip], rate: 2/1m, algorithm: fixed_window}
rls:
  - domain: edge
    descriptors:
      - entries: [{key: remote_address, as: ip}]
        rule: per-client
`))
	if err != nil {
		fmt.Println(err)
		return
	}
	// Fake time keeps the example's output exact; a real deployment uses
	// fallback.New(redisstore.New(...)) shared with the services.
	store, err := memstore.New(memstore.WithClock(clock.New(time.Time{})))
	if err != nil {
		fmt.Println(err)
		return
	}
	limiter, err := tiers.NewLimiter(store, policy)
	if err != nil {
		fmt.Println(err)
		return
	}
	srv, err := rls.New(limiter)
	if err != nil {
		fmt.Println(err)
		return
	}
	g := grpc.NewServer()
	srv.Register(g)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fmt.Println(err)
		return
	}
	go g.Serve(lis) //nolint:errcheck // ends when stopped
	defer g.Stop()

	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer conn.Close()
	client := rlsv3.NewRateLimitServiceClient(conn)
	// What Envoy sends for a route with rate_limits: [{actions: [{remote_address: {}}]}].
	req := &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*extrlsv3.RateLimitDescriptor{
		{Entries: []*extrlsv3.RateLimitDescriptor_Entry{{Key: "remote_address", Value: "192.0.2.1"}}},
	}}
	for range 3 {
		resp, err := client.ShouldRateLimit(context.Background(), req)
		if err != nil {
			fmt.Println(err)
			return
		}
		st := resp.Statuses[0]
		fmt.Println(resp.OverallCode, st.LimitRemaining, st.CurrentLimit.GetRequestsPerUnit(), st.CurrentLimit.GetUnit())
		for _, h := range resp.ResponseHeadersToAdd {
			fmt.Printf("  %s: %s\n", h.Key, h.Value)
		}
	}
	// Output:
	// OK 1 2 MINUTE
	//   ratelimit-policy: "per-client";q=2;w=60
	//   ratelimit: "per-client";r=1;t=60
	// OK 0 2 MINUTE
	//   ratelimit-policy: "per-client";q=2;w=60
	//   ratelimit: "per-client";r=0;t=60
	// OVER_LIMIT 0 2 MINUTE
	//   ratelimit-policy: "per-client";q=2;w=60
	//   ratelimit: "per-client";r=0;t=60
	//   retry-after: 60
}
