package sdktest

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/sony/gobreaker/v2"
	"go.opentelemetry.io/contrib/instrumentation/google.golang.org/grpc/otelgrpc"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/fallback"
	"github.com/floodgate-go/floodgate/interceptor"
	fgotel "github.com/floodgate-go/floodgate/otel"
	"github.com/floodgate-go/floodgate/testing/clock"
	"github.com/floodgate-go/floodgate/testing/redistest"
	"github.com/floodgate-go/floodgate/tiers"
	"github.com/floodgate-go/floodgate/tiers/redisstore"
)

// TestRealStackOverGRPC runs the real rate-limit stage (tiers.Limiter over
// the Redis store, guarded by package fallback) behind the gRPC interceptor
// and otelgrpc, against a real redis-server on fake time: two allowed
// calls, a denial from Redis, a denial from the over-limit cache, then
// Redis is killed and a local fallback decision follows while the breaker
// opens. Spans, decisions, cache hits and breaker state must match exactly.
func TestRealStackOverGRPC(t *testing.T) {
	h := newHarness(t)
	clk := clock.New(time.Unix(1_700_000_000, 0))
	rs := redistest.Start(t)
	primary, err := redisstore.New(rs.Client(), redisstore.WithClock(clk))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = primary.Close() })
	store, err := fallback.New(h.obs.Store(primary),
		fallback.WithClock(clk), fallback.WithName("redis"), fallback.WithFailures(1),
		fallback.WithTimeout(5*time.Second), fallback.WithOpenInterval(time.Minute),
		fallback.WithOnStateChange(func(name string, from, to gobreaker.State) {
			h.obs.BreakerStateChanged(name, from.String(), to.String())
		}))
	if err != nil {
		t.Fatal(err)
	}
	policy, err := tiers.Load([]byte(`
rules:
  - name: search
    key: [user]
    rate: 2/1s
    burst: 2
    cache_denials: true
`))
	if err != nil {
		t.Fatal(err)
	}
	limiter, err := tiers.NewLimiter(store, policy)
	if err != nil {
		t.Fatal(err)
	}

	// Capture what the limiter decided, to compare with what the span says.
	var mu sync.Mutex
	var decided []floodgate.Decision
	capture := floodgate.ObserverFunc(func(_ context.Context, _ *floodgate.Request, d floodgate.Decision, _ error) {
		mu.Lock()
		decided = append(decided, d)
		mu.Unlock()
	})
	srv := grpc.NewServer(
		grpc.StatsHandler(otelgrpc.NewServerHandler(otelgrpc.WithTracerProvider(h.tp))),
		grpc.ChainUnaryInterceptor(mustInterceptor(
			interceptor.WithObserver(h.obs, capture),
			interceptor.WithUser(interceptor.FromHeader("x-user")),
		).UnaryServer(limiter)),
	)
	client := serveGRPC(t, srv)

	steps := []struct {
		name             string
		before           func()
		code             codes.Code
		decision, source string
		limit, remaining int64
		retryAfter       float64
		degraded, checkQ bool
	}{
		{name: "allowed-1", code: codes.Unimplemented, decision: "allowed", source: "store", limit: 2, remaining: 1, checkQ: true},
		{name: "allowed-2", code: codes.Unimplemented, decision: "allowed", source: "store", limit: 2, remaining: 0, checkQ: true},
		// token bucket, empty: retry after (1 token * 1 s) / 2 per s = 0.5 s.
		{name: "limited", code: codes.ResourceExhausted, decision: "limited", source: "store", limit: 2, remaining: 0, retryAfter: 0.5, checkQ: true},
		{name: "cached", code: codes.ResourceExhausted, decision: "limited", source: "cache"},
		{name: "fallback", before: func() { rs.Kill(); clk.Advance(time.Second) }, code: codes.Unimplemented, decision: "allowed", source: "local_fallback", degraded: true},
	}
	for i, s := range steps {
		if s.before != nil {
			s.before()
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		ctx = metadata.AppendToOutgoingContext(ctx, "x-user", "alice")
		_, err := client.EmptyCall(ctx, &testgrpc.Empty{})
		cancel()
		if got := status.Code(err); got != s.code {
			t.Fatalf("%s: code %v (%v), want %v", s.name, got, err, s.code)
		}
		waitServerSpans(t, h, i+1)
	}
	srv.GracefulStop()

	spans := serverSpans(h)
	keyHash := h.obs.KeyHash(floodgate.Identity{User: "alice"})
	for i, s := range steps {
		d := decided[i]
		if got := d.Label(); got != s.decision || string(d.Source) != s.source {
			t.Errorf("%s: limiter decided %s from %s, want %s from %s", s.name, got, d.Source, s.decision, s.source)
		}
		if s.checkQ && (d.Limit != s.limit || d.Remaining != s.remaining || d.RetryAfter.Seconds() != s.retryAfter) {
			t.Errorf("%s: limit %d remaining %d retry %v, want %d %d %vs", s.name, d.Limit, d.Remaining, d.RetryAfter, s.limit, s.remaining, s.retryAfter)
		}
		// The span says exactly what the limiter decided.
		equalAttrs(t, s.name+" server span", floodgateAttrs(spans[i].Attributes()), map[string]string{
			"floodgate.decision":    "STRING:" + s.decision,
			"floodgate.stage":       "STRING:tiers",
			"floodgate.policy":      "STRING:search",
			"floodgate.source":      "STRING:" + s.source,
			"floodgate.limit":       fmt.Sprintf("INT64:%d", d.Limit),
			"floodgate.remaining":   fmt.Sprintf("INT64:%d", d.Remaining),
			"floodgate.retry_after": "FLOAT64:" + attribute.Float64Value(d.RetryAfter.Seconds()).String(),
			"floodgate.priority":    "STRING:unspecified",
			"floodgate.shadow":      "BOOL:false",
			"floodgate.degraded":    fmt.Sprintf("BOOL:%t", s.degraded),
			"floodgate.key_hash":    "STRING:" + keyHash,
		})
	}

	ms := h.collect(t)
	series := func(decision, source string, n int) string {
		return enc(fgotel.AttrStage.String("tiers"), fgotel.AttrDecision.String(decision), fgotel.AttrPolicy.String("search"),
			fgotel.AttrSource.String(source), fgotel.AttrPriority.String("unspecified"), fgotel.AttrShadow.Bool(false)) + fmt.Sprintf("=%d", n)
	}
	equalLines(t, "floodgate.decisions", intPoints[sum](t, ms["floodgate.decisions"]), []string{
		series("allowed", "store", 2), series("limited", "store", 1), series("limited", "cache", 1), series("allowed", "local_fallback", 1),
	})
	equalLines(t, "floodgate.cache.hits", intPoints[sum](t, ms["floodgate.cache.hits"]), []string{enc(fgotel.AttrPolicy.String("search")) + "=1"})
	b := func(st string, v int) string {
		return enc(fgotel.AttrBreaker.String("redis"), fgotel.AttrBreakerState.String(st)) + fmt.Sprintf("=%d", v)
	}
	equalLines(t, "floodgate.fallback.breaker.state", intPoints[gauge](t, ms["floodgate.fallback.breaker.state"]), []string{
		b("closed", 0), b("half_open", 0), b("open", 1),
	})
	// Every Take reached the instrumented primary: four answered (the
	// cached denial is answered inside the Redis store), one failed, and
	// error.type names its cause: Redis was killed, the dial refused.
	hist := ms["floodgate.store.duration"].Data.(metricdata.Histogram[float64])
	counts := map[string]uint64{}
	for _, p := range hist.DataPoints {
		counts[p.Attributes.Encoded(attribute.DefaultEncoder())] = p.Count
	}
	if want := map[string]uint64{enc(): 4, enc(fgotel.AttrErrorType.String("refused")): 1}; fmt.Sprint(counts) != fmt.Sprint(want) {
		t.Errorf("floodgate.store.duration counts %v, want %v", counts, want)
	}
	// ... each inside a floodgate.store span under its server span.
	var storeSpans int
	for _, sp := range h.rec.Ended() {
		if sp.Name() == "floodgate.store" {
			storeSpans++
		}
	}
	if storeSpans != 5 {
		t.Errorf("%d floodgate.store spans, want 5", storeSpans)
	}
	assertNoIdentity(t, ms)
}
