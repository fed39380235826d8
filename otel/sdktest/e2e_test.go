package sdktest

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"go.opentelemetry.io/contrib/instrumentation/google.golang.org/grpc/otelgrpc"
	"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"
	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/interceptor"
	fgotel "github.com/floodgate-go/floodgate/otel"
)

// scenario is what the scripted shedder and rate-limit stages decide for
// the next call. Calls are made one at a time, so one scenario is in force
// per call.
type scenario struct {
	name     string
	shed     bool // the shedder denies
	tiers    floodgate.Decision
	tiersErr error
	wantGRPC codes.Code
	wantHTTP int
}

func scenarios() []scenario {
	fallback := tiersAllow
	fallback.Source, fallback.Remaining = floodgate.SourceLocalFallback, 4
	return []scenario{
		{name: "allowed", tiers: tiersAllow, wantGRPC: codes.OK, wantHTTP: http.StatusOK},
		{name: "limited", tiers: tiersDeny, wantGRPC: codes.ResourceExhausted, wantHTTP: http.StatusTooManyRequests},
		{name: "shed", shed: true, wantGRPC: codes.Unavailable, wantHTTP: http.StatusServiceUnavailable},
		{name: "fallback", tiers: fallback, tiersErr: fmt.Errorf("fallback: store call: %w", context.DeadlineExceeded),
			wantGRPC: codes.OK, wantHTTP: http.StatusOK},
	}
}

// scriptedChain is a shedder stage and a rate-limit stage deciding as the
// current scenario says; the shedder echoes the priority the transport put
// on the Request, so the test sees that the Request went through.
func scriptedChain(cur *atomic.Pointer[scenario]) floodgate.Chain {
	shed := floodgate.AdmitFunc(func(_ context.Context, r *floodgate.Request) (floodgate.Decision, floodgate.Done, error) {
		if cur.Load().shed {
			return floodgate.Decision{Stage: floodgate.StageShedder, Source: floodgate.SourceShedder, Policy: "shedder",
				Limit: 100, RetryAfter: 2 * time.Second, Priority: r.Priority}, nil, nil
		}
		return floodgate.Decision{Allowed: true, Stage: floodgate.StageShedder, Source: floodgate.SourceShedder,
			Limit: 100, Remaining: 60, Priority: r.Priority}, func(floodgate.Result) {}, nil
	})
	tiers := floodgate.AdmitFunc(func(context.Context, *floodgate.Request) (floodgate.Decision, floodgate.Done, error) {
		s := cur.Load()
		return s.tiers, nil, s.tiersErr
	})
	return floodgate.Chain{shed, tiers}
}

// wantFloodgate is the floodgate.* attributes expected on the server span
// (and its last event) for a scenario.
func wantFloodgate(s scenario, prio, keyHash string) map[string]string {
	d := s.tiers
	if s.shed {
		d = floodgate.Decision{Stage: floodgate.StageShedder, Source: floodgate.SourceShedder, Policy: "shedder", Limit: 100, RetryAfter: 2 * time.Second}
	}
	return map[string]string{
		"floodgate.decision":    "STRING:" + d.Label(),
		"floodgate.stage":       "STRING:" + string(d.Stage),
		"floodgate.policy":      "STRING:" + d.Policy,
		"floodgate.source":      "STRING:" + string(d.Source),
		"floodgate.limit":       fmt.Sprintf("INT64:%d", d.Limit),
		"floodgate.remaining":   fmt.Sprintf("INT64:%d", d.Remaining),
		"floodgate.retry_after": "FLOAT64:" + attribute.Float64Value(d.RetryAfter.Seconds()).String(),
		"floodgate.priority":    "STRING:" + prio,
		"floodgate.shadow":      "BOOL:false",
		"floodgate.degraded":    fmt.Sprintf("BOOL:%t", d.Source.Degraded()),
		"floodgate.key_hash":    "STRING:" + keyHash,
	}
}

func floodgateAttrs(kvs []attribute.KeyValue) []attribute.KeyValue {
	var out []attribute.KeyValue
	for _, kv := range kvs {
		if strings.HasPrefix(string(kv.Key), "floodgate.") {
			out = append(out, kv)
		}
	}
	return out
}

// waitServerSpans waits (at most 5 s) until n server spans have ended. The
// transport instrumentation ends a server span after the response has gone
// out, so the client can return first; waiting keeps one scenario per span,
// in order.
func waitServerSpans(t *testing.T, h *harness, n int) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for len(serverSpans(h)) < n {
		if time.Now().After(deadline) {
			t.Fatalf("%d server spans ended after 5s, want %d", len(serverSpans(h)), n)
		}
		time.Sleep(time.Millisecond)
	}
}

func serverSpans(h *harness) []sdktrace.ReadOnlySpan {
	var out []sdktrace.ReadOnlySpan
	for _, s := range h.rec.Ended() {
		if s.SpanKind() == trace.SpanKindServer {
			out = append(out, s)
		}
	}
	return out
}

// checkE2E checks the server spans and the decision metrics after the
// scenarios ran, one call each, in order.
func checkE2E(t *testing.T, h *harness, spanName, prio string, keyHash string) {
	t.Helper()
	spans := serverSpans(h)
	scs := scenarios()
	if len(spans) != len(scs) {
		t.Fatalf("%d server spans, want %d", len(spans), len(scs))
	}
	for i, s := range scs {
		sp := spans[i]
		if sp.Name() != spanName {
			t.Errorf("server span %d named %q, want %q", i, sp.Name(), spanName)
		}
		if sp.InstrumentationScope().Name == fgotel.ScopeName {
			t.Errorf("server span %d was started by floodgate, want the transport instrumentation's span", i)
		}
		want := wantFloodgate(s, prio, keyHash)
		equalAttrs(t, s.name+" server span", floodgateAttrs(sp.Attributes()), want)
		wantEvents := 2 // shedder, then tiers
		if s.shed {
			wantEvents = 1
		}
		if len(sp.Events()) != wantEvents {
			t.Fatalf("%s: %d events, want %d", s.name, len(sp.Events()), wantEvents)
		}
		last := sp.Events()[wantEvents-1]
		if s.tiersErr != nil {
			want["error.type"] = "STRING:timeout"
		}
		equalAttrs(t, s.name+" last event", last.Attributes, want)
	}
	series := func(stage, decision, policy, source string, n int) string {
		return enc(fgotel.AttrStage.String(stage), fgotel.AttrDecision.String(decision), fgotel.AttrPolicy.String(policy),
			fgotel.AttrSource.String(source), fgotel.AttrPriority.String(prio), fgotel.AttrShadow.Bool(false)) + fmt.Sprintf("=%d", n)
	}
	ms := h.collect(t)
	equalLines(t, "floodgate.decisions", intPoints[sum](t, ms["floodgate.decisions"]), []string{
		series("shedder", "allowed", "", "shedder", 3),
		series("shedder", "shed", "shedder", "shedder", 1),
		series("tiers", "allowed", "search", "store", 1),
		series("tiers", "limited", "search", "store", 1),
		series("tiers", "allowed", "search", "local_fallback", 1),
	})
	assertNoIdentity(t, ms)
}

const apiKey = "sk_live_e2e_secret"

// TestGRPCEndToEnd makes real gRPC calls over loopback TCP to a server
// instrumented with otelgrpc's stats handler and a floodgate interceptor
// reporting to the Observer: the decision must land on otelgrpc's server
// span, and the metrics must count every stage's decision.
func TestGRPCEndToEnd(t *testing.T) {
	h := newHarness(t)
	var cur atomic.Pointer[scenario]
	const method = "/grpc.testing.TestService/EmptyCall"
	srv := grpc.NewServer(
		grpc.StatsHandler(otelgrpc.NewServerHandler(otelgrpc.WithTracerProvider(h.tp))),
		grpc.ChainUnaryInterceptor(mustInterceptor(
			interceptor.WithObserver(h.obs),
			interceptor.WithUser(interceptor.FromHeader("x-user")),
			interceptor.WithAPIKey(interceptor.FromHeader("x-api-key")),
			interceptor.WithMethods(map[string]floodgate.MethodOptions{method: {Priority: floodgate.PriorityWrite}}),
		).UnaryServer(scriptedChain(&cur))),
	)
	client := serveGRPC(t, srv)

	for i, s := range scenarios() {
		cur.Store(&s)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		ctx = metadata.AppendToOutgoingContext(ctx, "x-user", "alice", "x-api-key", apiKey)
		_, err := client.EmptyCall(ctx, &testgrpc.Empty{})
		cancel()
		// UnimplementedTestServiceServer answers Unimplemented once admitted.
		want := s.wantGRPC
		if want == codes.OK {
			want = codes.Unimplemented
		}
		if got := status.Code(err); got != want {
			t.Fatalf("%s: code %v (%v), want %v", s.name, got, err, want)
		}
		waitServerSpans(t, h, i+1)
	}
	srv.GracefulStop() // the stats handler ends the server spans
	checkE2E(t, h, "grpc.testing.TestService/EmptyCall", "write", h.obs.KeyHash(floodgate.Identity{APIKey: apiKey}))
}

// TestHTTPEndToEnd makes real HTTP requests over loopback to a server whose
// mux is wrapped by otelhttp and whose route is wrapped by the floodgate
// middleware reporting to the Observer: the decision must land on
// otelhttp's server span.
func TestHTTPEndToEnd(t *testing.T) {
	h := newHarness(t)
	var cur atomic.Pointer[scenario]
	mw := mustInterceptor(
		interceptor.WithObserver(h.obs),
		interceptor.WithUser(interceptor.FromHeader("X-User")),
		interceptor.WithAPIKey(interceptor.FromHeader("X-Api-Key")),
	).HTTP(scriptedChain(&cur))
	mux := http.NewServeMux()
	mux.Handle("GET /v1/items/{id}", mw(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_, _ = w.Write([]byte("ok"))
	})))
	srv := httptest.NewServer(otelhttp.NewHandler(mux, "items", otelhttp.WithTracerProvider(h.tp)))
	t.Cleanup(srv.Close)

	for i, s := range scenarios() {
		cur.Store(&s)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL+"/v1/items/42", nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("X-User", "alice")
		req.Header.Set("X-Api-Key", apiKey)
		resp, err := srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_ = resp.Body.Close()
		cancel()
		if resp.StatusCode != s.wantHTTP {
			t.Fatalf("%s: status %d, want %d", s.name, resp.StatusCode, s.wantHTTP)
		}
		waitServerSpans(t, h, i+1)
	}
	srv.Close() // every handler has returned, so otelhttp ended its spans
	// otelhttp names its server span after the route the mux matched.
	checkE2E(t, h, "GET /v1/items/{id}", "read", h.obs.KeyHash(floodgate.Identity{APIKey: apiKey}))
}
