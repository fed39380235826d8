package interceptor

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/concurrency"
	"github.com/floodgate-go/floodgate/internal/testpb"
	"github.com/floodgate-go/floodgate/shedder"
	"github.com/floodgate-go/floodgate/tiers"
	"github.com/floodgate-go/floodgate/tiers/memstore"
)

// fullChain builds the real stages: a shedder, a concurrency limiter and a
// 4-level tiers limiter on the memstore, sized never to deny in a
// benchmark, plus the request-building options that feed them.
func fullChain(b testing.TB) ([]floodgate.Admitter, []Option) {
	b.Helper()
	shed, err := shedder.New(1 << 20)
	if err != nil {
		b.Fatal(err)
	}
	conc, err := concurrency.New(concurrency.WithGlobal(1 << 20))
	if err != nil {
		b.Fatal(err)
	}
	policy, err := tiers.Load([]byte(`
rules:
  - {name: endpoint, key: [endpoint], rate: 1000000000/1s}
  - {name: tenant, key: [tenant], rate: 1000000000/1s}
  - {name: user, key: [user], rate: 1000000000/1s}
  - {name: api-key, key: [api_key], rate: 1000000000/1s}
`))
	if err != nil {
		b.Fatal(err)
	}
	store, err := memstore.New()
	if err != nil {
		b.Fatal(err)
	}
	lim, err := tiers.NewLimiter(store, policy)
	if err != nil {
		b.Fatal(err)
	}
	// Identity as an auth layer would hand it over: verified claims in the
	// context, read without allocating.
	claims := map[string]any{"sub": "alice", "org": "acme", "key": "k-123"}
	fromAuth := func(ctx context.Context) (map[string]any, bool) { return claims, true }
	opts := []Option{
		WithUser(FromClaims(fromAuth, "sub")), WithTenant(FromClaims(fromAuth, "org")), WithAPIKey(FromClaims(fromAuth, "key")),
	}
	return []floodgate.Admitter{shed, conc, lim}, opts
}

// leanDeny denies every call as a rate-limit rule would (a policy, its
// quota and a retry-after): the cost of the deny path.
var leanDeny = floodgate.AdmitFunc(func(context.Context, *floodgate.Request) (floodgate.Decision, floodgate.Done, error) {
	return floodgate.Decision{Stage: floodgate.StageTiers, Source: floodgate.SourceStore, Policy: "user", Limit: 1000, Window: time.Second, RetryAfter: 1500 * time.Microsecond}, nil, nil
})

var lean = floodgate.AdmitFunc(func(context.Context, *floodgate.Request) (floodgate.Decision, floodgate.Done, error) {
	return floodgate.Decision{Allowed: true, Stage: floodgate.StageTiers}, nil, nil
})

// BenchmarkUnaryBufconn measures a unary call over bufconn with no
// interceptor, one lean interceptor, and the full chain (shedder,
// concurrency, 4-level tiers on the memstore) as three interceptors and as
// one interceptor around a floodgate.Chain. Per-call overhead is the
// difference from "none".
func BenchmarkUnaryBufconn(b *testing.B) {
	stages, opts := fullChain(b)
	fgTap := MustNew(opts...)
	type benchCase struct {
		name string
		ics  []grpc.UnaryServerInterceptor
		tap  bool
	}
	cases := []benchCase{
		{name: "none"},
		// grpc-go's own cost of running any interceptor at all.
		{name: "noopInterceptor", ics: []grpc.UnaryServerInterceptor{func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
			return h(ctx, req)
		}}},
		{name: "lean1", ics: []grpc.UnaryServerInterceptor{mustUnary(lean)}},
		// Every call denied with the status details of a rate limit.
		{name: "leanDeny1", ics: []grpc.UnaryServerInterceptor{mustUnary(leanDeny)}},
		{name: "full3", ics: func() []grpc.UnaryServerInterceptor {
			fg := MustNew(opts...)
			return []grpc.UnaryServerInterceptor{fg.UnaryServer(stages[0]), fg.UnaryServer(stages[1]), fg.UnaryServer(stages[2])}
		}()},
		{name: "fullChain", ics: []grpc.UnaryServerInterceptor{mustUnary(floodgate.Chain(stages), opts...)}},
		// The shedder decided at the tap (TapHandle), the chain in the
		// interceptor taking its admission.
		{name: "fullChainTap", ics: []grpc.UnaryServerInterceptor{fgTap.UnaryServer(floodgate.Chain(stages))}, tap: true},
	}
	for _, tc := range cases {
		b.Run(tc.name, func(b *testing.B) {
			var sopts []grpc.ServerOption
			if tc.tap {
				sopts = append(sopts, grpc.InTapHandle(fgTap.TapHandle(stages[0])))
			}
			if tc.ics != nil {
				sopts = append(sopts, grpc.ChainUnaryInterceptor(tc.ics...))
			}
			c := testpb.NewEchoClient(startBufconn(b, &echoServer{}, sopts))
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			req := &testpb.EchoRequest{Message: "x"}
			call := func() {
				_, err := c.Plain(ctx, req)
				if tc.name == "leanDeny1" {
					if status.Code(err) != codes.ResourceExhausted {
						b.Fatalf("got %v, want ResourceExhausted", err)
					}
					return
				}
				if err != nil {
					b.Fatal(err)
				}
			}
			call()
			b.ReportAllocs()
			for b.Loop() {
				call()
			}
		})
	}
}

// BenchmarkUnaryDirect calls the server interceptors directly, without a
// transport, so the figure is the interceptors' own cost (the incoming
// context carries a peer-less call, as over bufconn).
func BenchmarkUnaryDirect(b *testing.B) {
	stages, opts := fullChain(b)
	info := &grpc.UnaryServerInfo{FullMethod: "/floodgate.test.v1.Echo/Plain"}
	handler := func(ctx context.Context, req any) (any, error) { return req, nil }
	chainOf := func(ics ...grpc.UnaryServerInterceptor) grpc.UnaryHandler {
		h := grpc.UnaryHandler(handler)
		for i := len(ics) - 1; i >= 0; i-- {
			ic, next := ics[i], h
			h = func(ctx context.Context, req any) (any, error) { return ic(ctx, req, info, next) }
		}
		return h
	}
	cases := []struct {
		name string
		h    grpc.UnaryHandler
	}{
		{"none", chainOf()},
		{"lean1", chainOf(mustUnary(lean))},
		{"full3", func() grpc.UnaryHandler {
			fg := MustNew(opts...)
			return chainOf(fg.UnaryServer(stages[0]), fg.UnaryServer(stages[1]), fg.UnaryServer(stages[2]))
		}()},
		{"fullChain", chainOf(mustUnary(floodgate.Chain(stages), opts...))},
	}
	ctx := metadata.NewIncomingContext(context.Background(), metadata.Pairs("x-other", "1"))
	for _, tc := range cases {
		b.Run(tc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := tc.h(ctx, info); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// discardWriter is a reusable http.ResponseWriter, so the benchmark counts
// the middleware's allocations, not a recorder's.
type discardWriter struct{ h http.Header }

func (w *discardWriter) Header() http.Header         { return w.h }
func (w *discardWriter) Write(b []byte) (int, error) { return len(b), nil }
func (w *discardWriter) WriteHeader(int)             {}

// BenchmarkHTTPDirect runs the middleware around a no-op handler: "lean"
// is an allowing stage with no quota to report, "quota" adds the
// RateLimit-Policy and RateLimit fields of a rate-limit decision, and
// "leanDeny" is a rate-limit deny (the 429 with its headers and body),
// "customDeny" the same deny written by a WithDenyResponse Body.
func BenchmarkHTTPDirect(b *testing.B) {
	quota := floodgate.AdmitFunc(func(context.Context, *floodgate.Request) (floodgate.Decision, floodgate.Done, error) {
		return floodgate.Decision{Allowed: true, Stage: floodgate.StageTiers, Policy: "tenant-plan", Limit: 5000, Window: time.Hour, Remaining: 4123, Reset: 12 * time.Second}, nil, nil
	})
	next := http.HandlerFunc(func(http.ResponseWriter, *http.Request) {})
	body := []byte(`{"message":"API rate limit exceeded"}`)
	custom := WithDenyResponse(DenyResponse{Body: func(context.Context, floodgate.Decision) []byte { return body }})
	for _, tc := range []struct {
		name string
		a    floodgate.Admitter
		opts []Option
	}{{"lean", lean, nil}, {"quota", quota, nil}, {"leanDeny", leanDeny, nil}, {"customDeny", leanDeny, []Option{custom}}} {
		b.Run(tc.name, func(b *testing.B) {
			h := mustHTTP(tc.a, tc.opts...)(next)
			req := httptest.NewRequest("GET", "/v1/items/7", nil)
			req.Pattern = "GET /v1/items/{id}"
			w := &discardWriter{h: http.Header{}}
			b.ReportAllocs()
			for b.Loop() {
				clear(w.h)
				h.ServeHTTP(w, req)
			}
		})
	}
}
