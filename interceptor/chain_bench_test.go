package interceptor

import (
	"context"
	"math/rand/v2"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/concurrency"
	"github.com/floodgate-go/floodgate/quota"
	"github.com/floodgate-go/floodgate/shedder"
	"github.com/floodgate-go/floodgate/tiers"
	"github.com/floodgate-go/floodgate/tiers/localfirst"
	"github.com/floodgate-go/floodgate/tiers/memstore"
)

// BenchmarkChainZipf is the server side of bench/cmd/grpcload's
// chain-*-4 rows without a transport: three interceptors (shedder,
// per-user concurrency, the four levels of its policy) over the memstore,
// exact or through a localfirst store (leased, async), identity from the
// x-tenant, x-user and x-api-key headers of principals drawn by zipf
// (exponent 1.1) over 10 000. Time is fake and moves 33 µs a call (about
// grpcload's rate), so every run decides the same calls the same way:
// the denied/op column says how many were refused (about an eighth,
// the deny path included). Its use is to compare builds by instructions
// under valgrind --tool=callgrind (GOMAXPROCS=1, GODEBUG=asyncpreemptoff=1,
// two -benchtime counts, the difference divided by theirs), which the
// machine's load does not change; bench/README.md, "The chain in
// instructions", has the figures.
func BenchmarkChainZipf(b *testing.B) {
	for _, mode := range []string{"exact", "leased", "async"} {
		b.Run(mode, func(b *testing.B) {
			clk := &stepClock{}
			ms, err := memstore.New(memstore.WithClock(clk))
			if err != nil {
				b.Fatal(err)
			}
			var store quota.Store = ms
			cm := quota.Exact
			if mode != "exact" {
				lf, err := localfirst.New(ms, ms, localfirst.WithClock(clk))
				if err != nil {
					b.Fatal(err)
				}
				b.Cleanup(func() { _ = lf.Close(context.Background()) })
				store, cm = lf, quota.Leased
				if mode == "async" {
					cm = quota.Async
				}
			}
			runChainZipf(b, clk, store, zipfPolicy(cm))
		})
	}
}

// zipfPolicy is grpcload's four levels, every rule in mode; an async
// rule syncs at the longest interval, so that the syncs, which run on
// real time, do not weigh on a run in proportion to how slowly it runs.
func zipfPolicy(mode quota.Consistency) *tiers.Policy {
	perSec := func(n int64) tiers.Rate { return tiers.Rate{N: n, Period: time.Second} }
	rules := []tiers.Rule{
		{Name: "user", Key: []tiers.Scope{tiers.ScopeUser}, Rate: perSec(1_000)},
		{Name: "tenant", Key: []tiers.Scope{tiers.ScopeTenant}, Rate: perSec(100_000)},
		{Name: "api-key", Key: []tiers.Scope{tiers.ScopeAPIKey}, Rate: perSec(1_000)},
		{Name: "method-user", Key: []tiers.Scope{tiers.ScopeUser, tiers.ScopeEndpoint}, Rate: perSec(1_000)},
	}
	for i := range rules {
		rules[i].Consistency = mode
		rules[i].OnStoreError = quota.FailOpen
		if mode == quota.Async {
			rules[i].SyncInterval = tiers.MaxSyncInterval
		}
	}
	return &tiers.Policy{Rules: rules}
}

func runChainZipf(b *testing.B, clk *stepClock, store quota.Store, pol *tiers.Policy) {
	shed, err := shedder.New(10_000, shedder.WithClock(clk))
	if err != nil {
		b.Fatal(err)
	}
	conc, err := concurrency.New(
		concurrency.WithGlobal(10_000), concurrency.WithClock(clk),
		concurrency.WithPerKey(concurrency.PerKey{
			Name: "user-in-flight",
			Cap:  100,
			Key:  func(r *floodgate.Request) (string, bool) { return r.Identity.User, true },
		}),
	)
	if err != nil {
		b.Fatal(err)
	}
	limits, err := tiers.NewLimiter(store, pol)
	if err != nil {
		b.Fatal(err)
	}
	fg := MustNew(WithTenant(FromHeader("x-tenant")), WithUser(FromHeader("x-user")), WithAPIKey(FromHeader("x-api-key")))
	ics := []grpc.UnaryServerInterceptor{fg.UnaryServer(shed), fg.UnaryServer(conc), fg.UnaryServer(limits)}
	info := &grpc.UnaryServerInfo{FullMethod: "/floodgate.test.v1.Echo/Plain"}
	admitted := 0
	h := grpc.UnaryHandler(func(ctx context.Context, req any) (any, error) { admitted++; return req, nil })
	for i := len(ics) - 1; i >= 0; i-- {
		ic, next := ics[i], h
		h = func(ctx context.Context, req any) (any, error) { return ic(ctx, req, info, next) }
	}
	// The calls' contexts are built before the loop: what is measured is
	// the interceptors, not the metadata.
	z := rand.NewZipf(rand.New(rand.NewPCG(1, 2)), 1.1, 1, 9999)
	ctxs := make([]context.Context, 1<<14)
	for i := range ctxs {
		p := z.Uint64()
		ctx := grpc.NewContextWithServerTransportStream(context.Background(), &trailerStream{})
		ctxs[i] = metadata.NewIncomingContext(ctx, metadata.Pairs(
			"x-tenant", "t"+strconv.FormatUint(p/100, 10), "x-user", "u"+strconv.FormatUint(p, 10), "x-api-key", "k"+strconv.FormatUint(p, 10)))
	}
	b.ReportAllocs()
	n := 0
	for b.Loop() {
		clk.t.Add(int64(33 * time.Microsecond))
		_, _ = h(ctxs[n&(len(ctxs)-1)], info)
		n++
	}
	b.ReportMetric(1-float64(admitted)/float64(n), "denied/op")
}

// stepClock is a fake clock the benchmark moves by hand.
type stepClock struct{ t atomic.Int64 }

func (c *stepClock) Now() time.Time { return time.Unix(1e9, c.t.Load()) }

// trailerStream is a call's server transport stream, keeping what the
// interceptors set as grpc-go's does (without one, grpc.SetTrailer fails
// and formats its context into the error, which a real call never pays).
type trailerStream struct{ h, t metadata.MD }

func (s *trailerStream) Method() string                  { return "/floodgate.test.v1.Echo/Plain" }
func (s *trailerStream) SetHeader(md metadata.MD) error  { s.h = md; return nil }
func (s *trailerStream) SendHeader(md metadata.MD) error { s.h = md; return nil }
func (s *trailerStream) SetTrailer(md metadata.MD) error { s.t = md; return nil }
