package main

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"testing"
	"time"

	rlqsv3 "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/floodgate-go/floodgate/testing/redistest"
)

const quotaPolicy = `
rules:
  - {name: per-tenant, key: [tenant], rate: 100/1s, algorithm: token_bucket}
rls:
  - domain: edge
    quota: true
    descriptors:
      - entries: [{key: tenant, as: tenant}]
        rule: per-tenant
`

// serve-rls serves RLQS on the RLS port: health, an assignment, the
// usage charged to the rule's bucket in Redis, and a stop that does not
// wait for the long-lived streams to end.
func TestServeRLQS(t *testing.T) {
	srv := redistest.Start(t)
	path := filepath.Join(t.TempDir(), "policy.yaml")
	if err := os.WriteFile(path, []byte(quotaPolicy), 0o600); err != nil {
		t.Fatal(err)
	}
	outR, outW := io.Pipe()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	code := make(chan int, 1)
	go func() {
		code <- run(ctx, []string{"serve-rls", "-policy", path, "-listen", "127.0.0.1:0", "-redis", "redis://" + srv.Addr(),
			"-watch", "0", "-rlqs-tick", "20ms"}, outW, io.Discard)
		outW.Close()
	}()
	stdout := lines(outR)
	addr := await(t, stdout, regexp.MustCompile(`serving envoy.service.rate_limit_quota.v3.RateLimitQuotaService on (\S+) too`))[1]
	go func() {
		for range stdout { // drain
		}
	}()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	cctx, ccancel := context.WithTimeout(ctx, 30*time.Second)
	defer ccancel()
	hres, err := healthpb.NewHealthClient(conn).Check(cctx, &healthpb.HealthCheckRequest{Service: "envoy.service.rate_limit_quota.v3.RateLimitQuotaService"})
	if err != nil || hres.Status != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("health: %v, %v", hres, err)
	}
	st, err := rlqsv3.NewRateLimitQuotaServiceClient(conn).StreamRateLimitQuotas(cctx)
	if err != nil {
		t.Fatal(err)
	}
	id := &rlqsv3.BucketId{Bucket: map[string]string{"tenant": "acme"}}
	if err := st.Send(&rlqsv3.RateLimitQuotaUsageReports{Domain: "edge", BucketQuotaUsages: []*rlqsv3.RateLimitQuotaUsageReports_BucketQuotaUsage{
		{BucketId: id, TimeElapsed: durationpb.New(0), NumRequestsAllowed: 30}}}); err != nil {
		t.Fatal(err)
	}
	resp, err := st.Recv()
	if err != nil {
		t.Fatal(err)
	}
	tb := resp.GetBucketAction()[0].GetQuotaAssignmentAction().GetRateLimitStrategy().GetTokenBucket()
	if tb.GetTokensPerFill().GetValue() != 100 || tb.GetFillInterval().GetSeconds() != 1 {
		t.Fatalf("assignment %v; want 100 per 1 s", resp)
	}
	// The 30 units reach the services' bucket in Redis within a few ticks.
	key := "fg:{tenant=acme}:per-tenant:token_bucket"
	for i := 0; ; i++ {
		n, err := srv.Client().Exists(cctx, key).Result()
		if err == nil && n == 1 {
			break
		}
		if i == 250 {
			t.Fatalf("no bucket %s in Redis: %d, %v", key, n, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	stopped := time.Now()
	cancel()
	select {
	case c := <-code:
		if c != 0 {
			t.Fatalf("exit code %d", c)
		}
	case <-time.After(8 * time.Second):
		t.Fatal("serve-rls did not stop within 8 s (the drain timeout is 10 s: the RLQS stream held it)")
	}
	if _, err := st.Recv(); err == nil {
		t.Fatal("the stream is still open after the stop")
	}
	t.Logf("stopped in %s", time.Since(stopped))
}
