package rls_test

import (
	"context"
	"fmt"
	"net"

	rlqsv3 "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/floodgate-go/floodgate/rls"
	"github.com/floodgate-go/floodgate/tiers"
	"github.com/floodgate-go/floodgate/tiers/memstore"
)

// Envoy's rate limit quota service from a policy's quota domain: an
// Envoy's first report of a bucket is answered with its assignment, a
// token bucket of the rule's rate while it is the only client.
func ExampleNewQuota() {
	policy, err := tiers.Load([]byte(`
rules:
  - {name: per-tenant, key: [tenant], rate: 100/1s, algorithm: token_bucket}
rls:
  - domain: edge
    quota: true
    descriptors:
      - entries: [{key: tenant, as: tenant}]
        rule: per-tenant
`))
	if err != nil {
		fmt.Println(err)
		return
	}
	// A deployment uses a redisstore.Store shared with the services, and
	// rls.WithQuotaRedis for several servers.
	store, err := memstore.New()
	if err != nil {
		fmt.Println(err)
		return
	}
	limiter, err := tiers.NewLimiter(store, policy)
	if err != nil {
		fmt.Println(err)
		return
	}
	q, err := rls.NewQuota(limiter, store)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer q.Close(context.Background())
	g := grpc.NewServer()
	q.Register(g)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fmt.Println(err)
		return
	}
	go func() { _ = g.Serve(lis) }()
	defer g.Stop()

	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer conn.Close()
	st, err := rlqsv3.NewRateLimitQuotaServiceClient(conn).StreamRateLimitQuotas(context.Background())
	if err != nil {
		fmt.Println(err)
		return
	}
	_ = st.Send(&rlqsv3.RateLimitQuotaUsageReports{Domain: "edge", BucketQuotaUsages: []*rlqsv3.RateLimitQuotaUsageReports_BucketQuotaUsage{{
		BucketId:           &rlqsv3.BucketId{Bucket: map[string]string{"tenant": "acme"}},
		TimeElapsed:        durationpb.New(0),
		NumRequestsAllowed: 1,
	}}})
	resp, err := st.Recv()
	if err != nil {
		fmt.Println(err)
		return
	}
	qa := resp.GetBucketAction()[0].GetQuotaAssignmentAction()
	tb := qa.GetRateLimitStrategy().GetTokenBucket()
	fmt.Printf("%d tokens per %ds, at most %d, for %ds\n", tb.GetTokensPerFill().GetValue(), tb.GetFillInterval().GetSeconds(),
		tb.GetMaxTokens(), qa.GetAssignmentTimeToLive().GetSeconds())
	// Output: 100 tokens per 1s, at most 25, for 7s
}
