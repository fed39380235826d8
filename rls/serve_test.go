package rls_test

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	extrlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/floodgate-go/floodgate/policyfile"
	"github.com/floodgate-go/floodgate/quota"
	"github.com/floodgate-go/floodgate/rls"
	"github.com/floodgate-go/floodgate/testing/clock"
	"github.com/floodgate-go/floodgate/tiers"
	"github.com/floodgate-go/floodgate/tiers/memstore"
)

// gateStore holds every Take until released, telling entered when one
// arrives.
type gateStore struct {
	s       quota.Store
	entered chan struct{}
	release chan struct{}
	once    sync.Once
}

func (g *gateStore) Take(ctx context.Context, bs []quota.Bucket, res []quota.Result) (bool, error) {
	g.once.Do(func() { close(g.entered) })
	<-g.release
	return g.s.Take(ctx, bs, res)
}

func (g *gateStore) DecidesOnStoreError() bool { return true }

// Serve reports SERVING on the health service; at shutdown it turns
// NOT_SERVING, lets the call in flight finish, and returns nil.
func TestServeHealthAndGracefulShutdown(t *testing.T) {
	mem, err := memstore.New(memstore.WithClock(clock.New(time.Time{})))
	if err != nil {
		t.Fatal(err)
	}
	gate := &gateStore{s: mem, entered: make(chan struct{}), release: make(chan struct{})}
	p, err := tiers.Load([]byte(policy))
	if err != nil {
		t.Fatal(err)
	}
	l, err := tiers.NewLimiter(gate, p)
	if err != nil {
		t.Fatal(err)
	}
	srv, err := rls.New(l, rls.WithLogger(quiet), rls.WithDrainTimeout(20*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ctx, lis) }()

	conn := dial(t, lis.Addr().String())
	hc := healthpb.NewHealthClient(conn)
	for _, svc := range []string{"", rls.ServiceName} {
		res, err := hc.Check(ctxT(t), &healthpb.HealthCheckRequest{Service: svc})
		if err != nil || res.Status != healthpb.HealthCheckResponse_SERVING {
			t.Fatalf("health %q: %v, %v", svc, res, err)
		}
	}
	wctx, wcancel := context.WithCancel(ctxT(t))
	watch, err := hc.Watch(wctx, &healthpb.HealthCheckRequest{Service: rls.ServiceName})
	if err != nil {
		t.Fatal(err)
	}
	if res, err := watch.Recv(); err != nil || res.Status != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("watch: %v, %v", res, err)
	}

	// A call in flight, held in the store.
	client := rlsv3.NewRateLimitServiceClient(conn)
	type result struct {
		resp *rlsv3.RateLimitResponse
		err  error
	}
	inflight := make(chan result, 1)
	go func() {
		resp, err := client.ShouldRateLimit(ctxT(t), &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*extrlsv3.RateLimitDescriptor{d("remote_address", "192.0.2.1")}})
		inflight <- result{resp, err}
	}()
	<-gate.entered
	cancel() // shut down

	if res, err := watch.Recv(); err != nil || res.Status != healthpb.HealthCheckResponse_NOT_SERVING {
		t.Fatalf("watch after shutdown began: %v, %v", res, err)
	}
	wcancel() // the watcher leaves, as a load balancer's would
	close(gate.release)
	r := <-inflight
	if r.err != nil || r.resp.OverallCode != ok {
		t.Fatalf("the call in flight: %v, %v; want it answered", r.resp, r.err)
	}
	if err := <-served; err != nil {
		t.Fatalf("Serve: %v", err)
	}
	if _, err := net.Dial("tcp", lis.Addr().String()); err == nil {
		t.Fatal("the listener still accepts connections")
	}
}

// A policy file reloaded by policyfile.Watch changes the mapping and the rules
// of the running service at once; a bad reload keeps the policy in force.
func TestHotReload(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "policy.yaml")
	if err := os.WriteFile(path, []byte(policy), 0o600); err != nil {
		t.Fatal(err)
	}
	e := newEnv(t, policy)
	reloads := make(chan error, 8)
	ctx, cancel := context.WithCancel(context.Background())
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		_ = policyfile.Watch(ctx, path, policyfile.Targets{Limits: e.limiter}, policyfile.WithInterval(5*time.Millisecond), policyfile.WithLogger(quiet),
			policyfile.WithOnReload(func(_ *policyfile.File, err error) { reloads <- err }))
	}()
	defer func() { cancel(); <-watched }()
	wait := func() error {
		t.Helper()
		select {
		case err := <-reloads:
			return err
		case <-time.After(20 * time.Second):
			t.Fatal("no reload reported in 20s")
			return nil
		}
	}
	if err := wait(); err != nil { // the file as it is, once a second poll reads it unchanged
		t.Fatal(err)
	}
	if got := remaining(t, e.call(t, "edge", 0, d("remote_address", "192.0.2.1")), 0, ok); got != 2 {
		t.Fatalf("before: remaining %d", got)
	}
	// per-ip goes from 3/1m to 10/1m, and a new domain appears.
	next := replace(t, policy, "{name: per-ip, key: [ip], rate: 3/1m, algorithm: fixed_window}", "{name: per-ip, key: [ip], rate: 10/1m, algorithm: fixed_window}") + `
  - domain: other
    descriptors:
      - entries: [{key: remote_address, as: ip}]
        rule: per-ip
`
	if err := os.WriteFile(path, []byte(next), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := wait(); err != nil {
		t.Fatal(err)
	}
	resp := e.call(t, "other", 0, d("remote_address", "192.0.2.1"))
	if got := remaining(t, resp, 0, ok); got != 8 || resp.Statuses[0].CurrentLimit.GetRequestsPerUnit() != 10 {
		t.Fatalf("after the reload: %v; want the same bucket at the new limit (8 left of 10)", resp)
	}
	// A bad file: the mapping names a rule that does not exist.
	bad := next + `
      - entries: [{key: user, as: user}]
        rule: missing
`
	if err := os.WriteFile(path, []byte(bad), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := wait(); err == nil {
		t.Fatal("a bad policy was swapped in")
	}
	if got := remaining(t, e.call(t, "other", 0, d("remote_address", "192.0.2.1")), 0, ok); got != 7 {
		t.Fatalf("after the bad reload: remaining %d, want 7 under the policy in force", got)
	}
}

func replace(t *testing.T, s, old, new string) string {
	t.Helper()
	i := strings.Index(s, old)
	if i < 0 {
		t.Fatalf("%q not in the policy", old)
	}
	return s[:i] + new + s[i+len(old):]
}
