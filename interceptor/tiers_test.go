package interceptor

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/internal/testpb"
	"github.com/floodgate-go/floodgate/testing/clock"
	"github.com/floodgate-go/floodgate/tiers"
	"github.com/floodgate-go/floodgate/tiers/memstore"
)

// lastDecision records the most recent decision an Observer saw.
type lastDecision struct {
	mu sync.Mutex
	d  floodgate.Decision
}

func (l *lastDecision) Observe(_ context.Context, _ *floodgate.Request, d floodgate.Decision, _ error) {
	l.mu.Lock()
	l.d = d
	l.mu.Unlock()
}

func (l *lastDecision) get() floodgate.Decision {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.d
}

// The Expensive method is annotated cost 10: on a real tiers.Limiter over
// the memstore, one call takes 10 tokens of a 100-token bucket, a plain call
// 1, and the policy's methods table sets another.
func TestAnnotatedCostChargesTiers(t *testing.T) {
	t.Parallel()
	policy, err := tiers.Load([]byte(`
rules:
  - name: per-user
    key: [user]
    rate: 100/1h
    burst: 100
methods:
  /floodgate.test.v1.Echo/Bidi: {cost: 5}
`))
	if err != nil {
		t.Fatal(err)
	}
	clk := clock.New(time.Time{})
	store, err := memstore.New(memstore.WithClock(clk))
	if err != nil {
		t.Fatal(err)
	}
	lim, err := tiers.NewLimiter(store, policy)
	if err != nil {
		t.Fatal(err)
	}
	obs := &lastDecision{}
	// No option names the policy: the interceptors find the limiter's
	// methods: themselves.
	fg := MustNew(WithUser(FromHeader("x-user")), WithObserver(obs))
	c := testpb.NewEchoClient(startBufconn(t, &echoServer{}, []grpc.ServerOption{
		grpc.ChainUnaryInterceptor(fg.UnaryServer(lim)),
		grpc.ChainStreamInterceptor(fg.StreamServer(lim)),
	}))
	ctx := metadata.AppendToOutgoingContext(testCtx(t), "x-user", "alice")

	if _, err := c.Expensive(ctx, &testpb.EchoRequest{}); err != nil {
		t.Fatal(err)
	}
	if d := obs.get(); !d.Allowed || d.Policy != "per-user" || d.Remaining != 90 {
		t.Fatalf("after Expensive: %+v, want per-user with 90 remaining", d)
	}
	if _, err := c.Plain(ctx, &testpb.EchoRequest{}); err != nil {
		t.Fatal(err)
	}
	if d := obs.get(); d.Remaining != 89 {
		t.Fatalf("after Plain: remaining %d, want 89", d.Remaining)
	}
	bs, err := c.Bidi(ctx)
	if err != nil {
		t.Fatal(err)
	}
	_ = bs.CloseSend()
	if _, err := bs.Recv(); err == nil {
		t.Fatal("Bidi: want EOF")
	}
	if d := obs.get(); d.Remaining != 84 {
		t.Fatalf("after Bidi (policy cost 5): remaining %d, want 84", d.Remaining)
	}
	// 84 tokens: 8 more Expensive calls pass, the 9th is denied and must
	// wait for 6 tokens: 6 * 1h/100 = 216 s.
	for i := range 8 {
		if _, err := c.Expensive(ctx, &testpb.EchoRequest{}); err != nil {
			t.Fatalf("call %d: %v", i, err)
		}
	}
	var trailer metadata.MD
	_, err = c.Expensive(ctx, &testpb.EchoRequest{}, grpc.Trailer(&trailer))
	if status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("9th call: %v", err)
	}
	if got := trailer.Get(PushbackTrailer); len(got) != 1 || got[0] != "216000" {
		t.Errorf("pushback = %q, want 216000", got)
	}
	// Another user has a bucket of its own.
	if _, err := c.Expensive(metadata.AppendToOutgoingContext(testCtx(t), "x-user", "bob"), &testpb.EchoRequest{}); err != nil {
		t.Fatal(err)
	}
}

// HTTP over a real tiers.Limiter on the memstore and a fake clock: the
// RateLimit fields, Retry-After and body of a real fixed-window decision,
// and a hidden-quota rule that sends none of them.
func TestHTTPWithTiers(t *testing.T) {
	t.Parallel()
	policy, err := tiers.Load([]byte(`
rules:
  - name: items-ip
    match: {method: "GET /v1/items/{id}"}
    key: [ip]
    rate: 2/1m
    algorithm: fixed_window
  - name: login
    match: {method: "POST /login"}
    key: [ip]
    rate: 1/1m
    algorithm: fixed_window
    hide_quota: true
`))
	if err != nil {
		t.Fatal(err)
	}
	clk := clock.New(time.Time{})
	clk.Advance(15 * time.Second) // 45 s left in the minute window
	store, err := memstore.New(memstore.WithClock(clk))
	if err != nil {
		t.Fatal(err)
	}
	lim, err := tiers.NewLimiter(store, policy)
	if err != nil {
		t.Fatal(err)
	}
	mw := mustHTTP(lim)
	mux := http.NewServeMux()
	mux.Handle("GET /v1/items/{id}", mw(http.HandlerFunc(okHandler)))
	mux.Handle("POST /login", mw(http.HandlerFunc(okHandler)))
	srv := httptest.NewServer(mux)
	defer srv.Close()

	for i, want := range []struct {
		status    int
		rl, retry []string
	}{
		{200, []string{`"items-ip";r=1;t=45`}, nil},
		{200, []string{`"items-ip";r=0;t=45`}, nil},
		{429, []string{`"items-ip";r=0;t=45`}, []string{"45"}},
	} {
		res := get(t, srv, "GET", "/v1/items/1")
		if res.status != want.status {
			t.Fatalf("request %d: status %d, want %d", i, res.status, want.status)
		}
		checkHeader(t, res.header, map[string][]string{
			"RateLimit-Policy": {`"items-ip";q=2;w=60`}, "RateLimit": want.rl, "Retry-After": want.retry,
		})
	}
	for i, status := range []int{200, 429} {
		res := get(t, srv, "POST", "/login")
		if res.status != status {
			t.Fatalf("login %d: %d, want %d", i, res.status, status)
		}
		checkHeader(t, res.header, map[string][]string{"RateLimit-Policy": nil, "RateLimit": nil})
		if status == 429 && strings.Contains(res.body, "violated-policies") {
			t.Errorf("hidden quota leaked the policy: %s", res.body)
		}
	}
}
