package sdktest

import (
	"context"
	"net/netip"
	"testing"

	"go.opentelemetry.io/otel/metric"
	metricnoop "go.opentelemetry.io/otel/metric/noop"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	tracenoop "go.opentelemetry.io/otel/trace/noop"

	"github.com/floodgate-go/floodgate"
	fgotel "github.com/floodgate-go/floodgate/otel"
)

var benchReq = &floodgate.Request{Method: "/search.v1.Search/Query", Priority: floodgate.PriorityRead,
	Identity: floodgate.Identity{User: "alice", APIKey: "sk_live_bench", IP: netip.MustParseAddr("192.0.2.1")}}

// BenchmarkObserve measures the Observer's cost per decision:
//
//   - noop: no-op tracer and meter providers;
//   - sdk-unsampled: SDK meter provider (manual reader), span not sampled
//     (the common case in production: metrics only);
//   - sdk-span-baseline: start and end a sampled SDK span, no Observe;
//   - sdk-span-observe: the same plus one Observe; the difference with the
//     baseline is the cost of tagging a recording span (attributes, event,
//     key hash) plus the metric.
func BenchmarkObserve(b *testing.B) {
	d := tiersAllow
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewManualReader()))
	b.Cleanup(func() { _ = mp.Shutdown(context.Background()) })
	unsampled := sdktrace.NewTracerProvider(sdktrace.WithSampler(sdktrace.NeverSample()))
	sampled := sdktrace.NewTracerProvider(sdktrace.WithSampler(sdktrace.AlwaysSample()))
	// unsampledCtx carries a span that is not sampled.
	unsampledCtx, span := unsampled.Tracer("bench").Start(context.Background(), "request")
	defer span.End()
	observer := func(b *testing.B, tp trace.TracerProvider, mp metric.MeterProvider) *fgotel.Observer {
		b.Helper()
		obs, err := fgotel.New(fgotel.WithTracerProvider(tp), fgotel.WithMeterProvider(mp))
		if err != nil {
			b.Fatal(err)
		}
		b.ReportAllocs()
		return obs
	}

	b.Run("noop", func(b *testing.B) {
		obs := observer(b, tracenoop.NewTracerProvider(), metricnoop.NewMeterProvider())
		ctx := context.Background()
		for b.Loop() {
			obs.Observe(ctx, benchReq, d, nil)
		}
	})
	b.Run("sdk-unsampled", func(b *testing.B) {
		obs := observer(b, unsampled, mp)
		for b.Loop() {
			obs.Observe(unsampledCtx, benchReq, d, nil)
		}
	})
	b.Run("sdk-unsampled-parallel", func(b *testing.B) {
		obs := observer(b, unsampled, mp)
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				obs.Observe(unsampledCtx, benchReq, d, nil)
			}
		})
	})
	tracer := sampled.Tracer("bench")
	b.Run("sdk-span-baseline", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			_, span := tracer.Start(context.Background(), "request")
			span.End()
		}
	})
	b.Run("sdk-span-observe", func(b *testing.B) {
		obs := observer(b, sampled, mp)
		for b.Loop() {
			ctx, span := tracer.Start(context.Background(), "request")
			obs.Observe(ctx, benchReq, d, nil)
			span.End()
		}
	})
}
