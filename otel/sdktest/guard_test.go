package sdktest

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"testing"
	"time"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/floodgate-go/floodgate/guard"
	"github.com/floodgate-go/floodgate/testing/redistest"
)

// TestGuardTelemetryComplete: through package guard, with no hook of the
// user's, every metric of package otel's table is recorded: decisions,
// the store's call durations, requests in flight, the breaker's state and
// transitions (Redis killed until the breaker opens), and the local-first
// store's gauges.
func TestGuardTelemetryComplete(t *testing.T) {
	srv := redistest.Start(t)
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	tp := sdktrace.NewTracerProvider()
	t.Cleanup(func() {
		_ = mp.Shutdown(context.Background())
		_ = tp.Shutdown(context.Background())
	})
	g, err := guard.New(context.Background(),
		guard.WithPolicy([]byte("rules:\n  - {name: per-ip, key: [ip], rate: 2/1h}\n")),
		guard.WithRedisURL("redis://"+srv.Addr()), guard.WithService("telemetry"),
		guard.WithMeterProvider(mp), guard.WithTracerProvider(tp),
		guard.WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil))))
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close(context.Background())
	h := httptest.NewServer(g.HTTP(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {})))
	defer h.Close()
	get := func() {
		res, err := http.Get(h.URL)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
	}
	for range 3 {
		get()
	}
	srv.Kill()
	names := func() []string {
		var rm metricdata.ResourceMetrics
		if err := reader.Collect(context.Background(), &rm); err != nil {
			t.Fatal(err)
		}
		var ns []string
		for _, sm := range rm.ScopeMetrics {
			for _, m := range sm.Metrics {
				ns = append(ns, m.Name)
			}
		}
		return ns
	}
	deadline := time.Now().Add(10 * time.Second)
	for !slices.Contains(names(), "floodgate.fallback.breaker.transitions") {
		if time.Now().After(deadline) {
			t.Fatalf("the breaker did not open within 10s of Redis killed; metrics: %v", names())
		}
		get()
	}
	got := names()
	for _, want := range []string{
		"floodgate.decisions", "floodgate.store.duration", "floodgate.in_flight",
		"floodgate.fallback.breaker.state", "floodgate.fallback.breaker.transitions",
		"floodgate.localfirst.keys",
	} {
		if !slices.Contains(got, want) {
			t.Errorf("no %s among the metrics recorded: %v", want, got)
		}
	}
}
