package rls_test

import (
	"context"
	"testing"

	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"google.golang.org/grpc"

	fgotel "github.com/floodgate-go/floodgate/otel"
	"github.com/floodgate-go/floodgate/rls"
	"github.com/floodgate-go/floodgate/testing/clock"
	"github.com/floodgate-go/floodgate/tiers"
	"github.com/floodgate-go/floodgate/tiers/memstore"
)

// Every descriptor's decision goes to package otel's Observer: counted in
// floodgate.decisions by rule, and the call's span carries the binding
// (denying) decision last.
func TestObserverMetricsAndSpan(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec), sdktrace.WithSampler(sdktrace.AlwaysSample()))
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	t.Cleanup(func() {
		_ = tp.Shutdown(context.Background())
		_ = mp.Shutdown(context.Background())
	})
	obs, err := fgotel.New(fgotel.WithTracerProvider(tp), fgotel.WithMeterProvider(mp))
	if err != nil {
		t.Fatal(err)
	}
	store, err := memstore.New(memstore.WithClock(clock.New(clock.Epoch)))
	if err != nil {
		t.Fatal(err)
	}
	p, err := tiers.Load([]byte(policy))
	if err != nil {
		t.Fatal(err)
	}
	l, err := tiers.NewLimiter(store, p)
	if err != nil {
		t.Fatal(err)
	}
	srv, err := rls.New(l, rls.WithObserver(obs), rls.WithLogger(quiet))
	if err != nil {
		t.Fatal(err)
	}
	// A server span per call, as otelgrpc's stats handler starts one.
	tracer := tp.Tracer("test")
	g := grpc.NewServer(grpc.UnaryInterceptor(func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		ctx, span := tracer.Start(ctx, info.FullMethod)
		defer span.End()
		return h(ctx, req)
	}))
	srv.Register(g)
	_, client := serve(t, g)
	e := &env{client: client}
	for range 3 {
		e.call(t, "edge", 0, d("tenant-id", "acme"), d("remote_address", "192.0.2.1"))
	}
	resp := e.call(t, "edge", 0, d("tenant-id", "acme"), d("remote_address", "192.0.2.1"))
	if resp.OverallCode != over {
		t.Fatalf("%v", resp)
	}

	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	counts := map[[2]string]int64{} // policy, decision -> count
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if m.Name != "floodgate.decisions" {
				continue
			}
			for _, dp := range m.Data.(metricdata.Sum[int64]).DataPoints {
				pol, _ := dp.Attributes.Value(attribute.Key("floodgate.policy"))
				dec, _ := dp.Attributes.Value(attribute.Key("floodgate.decision"))
				counts[[2]string{pol.AsString(), dec.AsString()}] += dp.Value
			}
		}
	}
	want := map[[2]string]int64{{"per-tenant", "allowed"}: 4, {"per-ip", "allowed"}: 3, {"per-ip", "limited"}: 1}
	for k, v := range want {
		if counts[k] != v {
			t.Errorf("floodgate.decisions%v = %d, want %d (all: %v)", k, counts[k], v, counts)
		}
	}
	if len(counts) != len(want) {
		t.Errorf("decisions %v, want %v", counts, want)
	}

	spans := rec.Ended()
	if len(spans) != 4 {
		t.Fatalf("%d spans, want 4", len(spans))
	}
	last := spans[3]
	attrs := map[attribute.Key]attribute.Value{}
	for _, kv := range last.Attributes() {
		attrs[kv.Key] = kv.Value
	}
	if attrs["floodgate.decision"].AsString() != "limited" || attrs["floodgate.policy"].AsString() != "per-ip" || attrs["floodgate.stage"].AsString() != "tiers" {
		t.Errorf("span attributes %v: want the binding per-ip denial", attrs)
	}
	if _, ok := attrs["floodgate.key_hash"]; !ok {
		t.Errorf("span has no floodgate.key_hash: the descriptor's identity did not reach the observer")
	}
	if n := len(last.Events()); n != 2 {
		t.Errorf("%d span events, want one per descriptor (2)", n)
	}
}
