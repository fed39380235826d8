package interceptor

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/internal/testpb"
	"github.com/floodgate-go/floodgate/quota"
	"github.com/floodgate-go/floodgate/testing/clock"
	"github.com/floodgate-go/floodgate/tiers"
	"github.com/floodgate-go/floodgate/tiers/memstore"
)

// shapingLimiter is a real tiers.Limiter over the memstore on clk.
func shapingLimiter(t *testing.T, clk *clock.Fake, policy string) (*tiers.Limiter, *memstore.Store) {
	t.Helper()
	p, err := tiers.Load([]byte(policy))
	if err != nil {
		t.Fatal(err)
	}
	store, err := memstore.New(memstore.WithClock(clk))
	if err != nil {
		t.Fatal(err)
	}
	l, err := tiers.NewLimiter(store, p, tiers.WithClock(clk))
	if err != nil {
		t.Fatal(err)
	}
	return l, store
}

// left reads what the tenant's bucket of rule holds, charging nothing.
func left(t *testing.T, l *tiers.Limiter, s quota.Store, tenant, rule string) int64 {
	t.Helper()
	for _, b := range l.Buckets(nil, &floodgate.Request{Method: "GET /v1/complete", Identity: floodgate.Identity{Tenant: tenant}}) {
		if b.Rule == rule {
			b.Cost = 0
			var res [1]quota.Result
			if _, err := s.Take(context.Background(), []quota.Bucket{b}, res[:]); err != nil {
				t.Fatal(err)
			}
			return res[0].Remaining
		}
	}
	t.Fatalf("no bucket of %q", rule)
	return 0
}

// An HTTP call is charged the WithCost estimate at admission and settled
// with what its handler reported: the tenant's bucket ends exactly the
// reported cost lower.
func TestCostEstimateThenSettleHTTP(t *testing.T) {
	t.Parallel()
	clk := clock.New(time.Time{})
	l, store := shapingLimiter(t, clk, `
rules:
  - {name: tokens, key: [tenant], rate: 1000/1h, settle: true}
`)
	mw := MustNew(WithTenant(FromHeader("x-tenant")), WithCost(func(_ context.Context, _ string, md Metadata) int64 {
		n, _ := strconv.ParseInt(md.Get("x-max-tokens"), 10, 64)
		return n
	})).HTTP(l)
	var during int64
	mux := http.NewServeMux()
	mux.Handle("GET /v1/complete", mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		during = left(t, l, store, "acme", "tokens")
		if err := floodgate.ReportCost(r.Context(), 42); err != nil {
			t.Error(err)
		}
	})))
	req := httptest.NewRequest("GET", "/v1/complete", nil)
	req.Header.Set("x-tenant", "acme")
	req.Header.Set("x-max-tokens", "500")
	rec := httptest.NewRecorder()
	mux.ServeHTTP(rec, req)
	if rec.Code != http.StatusOK {
		t.Fatalf("status %d", rec.Code)
	}
	if during != 500 {
		t.Fatalf("during the handler %d left, want 500 (the estimate charged)", during)
	}
	if got := left(t, l, store, "acme", "tokens"); got != 958 {
		t.Fatalf("after the call %d left, want 958 (42 reported)", got)
	}
}

func TestWithCostNil(t *testing.T) {
	t.Parallel()
	if _, err := New(WithCost(nil)); err == nil || err.Error() != "interceptor: WithCost: func is nil" {
		t.Fatalf("New(WithCost(nil)) = %v", err)
	}
}

const waitingPolicy = `
rules:
  - {name: shaped, key: [tenant], rate: 10/1s, burst: 1, max_wait: 1s}
`

// A call a max_wait rule held reports its wait in Server-Timing.
func TestWaitServerTimingHTTP(t *testing.T) {
	t.Parallel()
	clk := clock.New(time.Time{})
	l, _ := shapingLimiter(t, clk, waitingPolicy)
	h := MustNew(WithTenant(FromHeader("x-tenant")), WithRoute(func(*http.Request) string { return "GET /v1/complete" })).
		HTTP(l)(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	call := func() *httptest.ResponseRecorder {
		req := httptest.NewRequest("GET", "/v1/complete", nil)
		req.Header.Set("x-tenant", "acme")
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		return rec
	}
	if rec := call(); rec.Code != http.StatusOK || rec.Header().Get(serverTimingHeader) != "" {
		t.Fatalf("first call: %d %q, want 200 without a wait", rec.Code, rec.Header().Get(serverTimingHeader))
	}
	got := make(chan *httptest.ResponseRecorder, 1)
	go func() { got <- call() }()
	waitFor(t, "the call to wait", func() bool { return clk.Timers() == 1 })
	clk.Advance(100 * time.Millisecond)
	rec := <-got
	if rec.Code != http.StatusOK || rec.Header().Get(serverTimingHeader) != "floodgate-wait;dur=100" {
		t.Fatalf("second call: %d %q, want 200 with floodgate-wait;dur=100", rec.Code, rec.Header().Get(serverTimingHeader))
	}
}

// The same over gRPC: the wait comes back in the response headers.
func TestWaitServerTimingGRPC(t *testing.T) {
	t.Parallel()
	clk := clock.New(time.Time{})
	l, _ := shapingLimiter(t, clk, waitingPolicy)
	c := unaryServer(t, &echoServer{}, MustNew(WithTenant(FromHeader("x-tenant"))).UnaryServer(l))
	ctx := metadata.AppendToOutgoingContext(testCtx(t), "x-tenant", "acme")
	if _, err := c.Plain(ctx, &testpb.EchoRequest{Message: "x"}); err != nil {
		t.Fatal(err)
	}
	type answer struct {
		md  metadata.MD
		err error
	}
	got := make(chan answer, 1)
	go func() {
		var md metadata.MD
		_, err := c.Plain(ctx, &testpb.EchoRequest{Message: "x"}, grpc.Header(&md))
		got <- answer{md, err}
	}()
	waitFor(t, "the call to wait", func() bool { return clk.Timers() == 1 })
	clk.Advance(150 * time.Millisecond)
	a := <-got
	if a.err != nil || len(a.md.Get("server-timing")) != 1 || a.md.Get("server-timing")[0] != "floodgate-wait;dur=100" {
		t.Fatalf("second call: %v, server-timing %q, want floodgate-wait;dur=100", a.err, a.md.Get("server-timing"))
	}
}

func TestServerTimingFormat(t *testing.T) {
	t.Parallel()
	for d, want := range map[time.Duration]string{
		100 * time.Millisecond:  "floodgate-wait;dur=100",
		1500 * time.Microsecond: "floodgate-wait;dur=1.5",
		time.Microsecond:        "floodgate-wait;dur=0.001",
		2 * time.Second:         "floodgate-wait;dur=2000",
	} {
		if got := serverTiming(d); got != want {
			t.Errorf("serverTiming(%v) = %q, want %q", d, got, want)
		}
	}
}

// TestCostPrecedence pins where WithCost stands among the sources of a
// call's cost: a positive estimate wins over the method's cost from every
// source (the policy's methods:, WithMethods, the proto annotation); 0, or
// a negative estimate (ignored), leaves the method's cost.
func TestCostPrecedence(t *testing.T) {
	const exp = "/floodgate.test.v1.Echo/Expensive"
	for _, tc := range []struct {
		name     string
		estimate int64
		policy   map[string]floodgate.MethodOptions
		opts     []Option
		want     int64
	}{
		{"estimate over annotation", 40, nil, nil, 40},
		{"estimate over Go map", 40, nil, []Option{WithMethods(map[string]floodgate.MethodOptions{exp: {Cost: 3}})}, 40},
		{"estimate over policy", 40, map[string]floodgate.MethodOptions{exp: {Cost: 7}}, nil, 40},
		{"zero keeps annotation", 0, nil, nil, 10},
		{"zero keeps policy", 0, map[string]floodgate.MethodOptions{exp: {Cost: 7}}, nil, 7},
		{"negative keeps policy", -1, map[string]floodgate.MethodOptions{exp: {Cost: 7}}, nil, 7},
	} {
		t.Run(tc.name, func(t *testing.T) {
			captureSlog(t)
			s := &stage{}
			var a floodgate.Admitter = s
			if tc.policy != nil {
				a = &policyStage{stage: s, methods: tc.policy}
			}
			opts := append([]Option{WithCost(func(context.Context, string, Metadata) int64 { return tc.estimate })}, tc.opts...)
			c := unaryServer(t, &echoServer{}, mustUnary(a, opts...))
			if _, err := c.Expensive(testCtx(t), &testpb.EchoRequest{}); err != nil {
				t.Fatal(err)
			}
			if got := s.requests()[0].Cost; got != tc.want {
				t.Errorf("%s: cost %d, want %d", exp, got, tc.want)
			}
		})
	}
}
