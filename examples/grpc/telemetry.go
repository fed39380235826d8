package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"time"

	promclient "github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	promexporter "go.opentelemetry.io/otel/exporters/prometheus"
	"go.opentelemetry.io/otel/exporters/stdout/stdouttrace"
	"go.opentelemetry.io/otel/metric"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/concurrency"
	"github.com/floodgate-go/floodgate/shedder"
)

// telemetry is the service's OpenTelemetry SDK: a meter provider whose
// Prometheus exporter has a registry of its own, served on a port of its
// own, and a tracer provider that prints every span as a line of JSON
// with -trace, written synchronously (for watching a run, not for
// production, where a batching OTLP exporter belongs) and samples none
// without it. guard records floodgate's metrics and span attributes on
// both (guard.WithMeterProvider, WithTracerProvider); otelgrpc its own.
type telemetry struct {
	mp      *sdkmetric.MeterProvider
	tp      *sdktrace.TracerProvider
	metrics http.Handler
}

func newTelemetry(traces io.Writer) (*telemetry, error) {
	reg := promclient.NewRegistry()
	exporter, err := promexporter.New(promexporter.WithRegisterer(reg))
	if err != nil {
		return nil, fmt.Errorf("prometheus exporter: %w", err)
	}
	t := &telemetry{
		mp:      sdkmetric.NewMeterProvider(sdkmetric.WithReader(exporter)),
		tp:      sdktrace.NewTracerProvider(sdktrace.WithSampler(sdktrace.NeverSample())),
		metrics: promhttp.HandlerFor(reg, promhttp.HandlerOpts{}),
	}
	if traces != nil {
		spans, err := stdouttrace.New(stdouttrace.WithWriter(traces))
		if err != nil {
			return nil, fmt.Errorf("span exporter: %w", err)
		}
		t.tp = sdktrace.NewTracerProvider(sdktrace.WithSyncer(spans))
	}
	return t, nil
}

// shutdown flushes and stops both providers.
func (t *telemetry) shutdown(ctx context.Context) error {
	return errors.Join(t.tp.Shutdown(ctx), t.mp.Shutdown(ctx))
}

// observeStages exports what the overload stages of chain hold now,
// found through guard's wrappers (floodgate.As), as two gauges read at
// every scrape:
//
//	shop_shedder_capacity          the shedder's capacity: the policy's, or what an adaptive one learnt
//	shop_adaptive_in_flight_limit  the adaptive in-flight limit, with the policy's concurrency: adaptive:
func (t *telemetry) observeStages(chain floodgate.Admitter) (unregister func() error, err error) {
	meter := t.mp.Meter("github.com/floodgate-go/floodgate/examples/grpc")
	shed, ok := floodgate.As[*shedder.Shedder](chain)
	if !ok {
		return nil, errors.New("no shedder in the chain")
	}
	capGauge, err := meter.Int64ObservableGauge("shop.shedder.capacity",
		metric.WithDescription("The shedder's capacity, in requests in flight."))
	if err != nil {
		return nil, fmt.Errorf("stage metrics: %w", err)
	}
	observed := []metric.Observable{capGauge}
	adaptive, hasAdaptive := floodgate.As[*concurrency.Adaptive](chain)
	var limitGauge metric.Int64ObservableGauge
	if hasAdaptive {
		if limitGauge, err = meter.Int64ObservableGauge("shop.adaptive.in_flight_limit",
			metric.WithDescription("The adaptive in-flight limit (Gradient2).")); err != nil {
			return nil, fmt.Errorf("stage metrics: %w", err)
		}
		observed = append(observed, limitGauge)
	}
	reg, err := meter.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		o.ObserveInt64(capGauge, shed.Capacity())
		if hasAdaptive {
			o.ObserveInt64(limitGauge, adaptive.Limit())
		}
		return nil
	}, observed...)
	if err != nil {
		return nil, fmt.Errorf("stage metrics: %w", err)
	}
	return reg.Unregister, nil
}

// serveMetrics serves h on /metrics at addr in the background. It returns
// the address it listens on (addr may name port 0) and a function that
// stops it.
func serveMetrics(addr string, h http.Handler) (string, func(), error) {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", h)
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return "", nil, fmt.Errorf("metrics listener: %w", err)
	}
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go srv.Serve(ln) //nolint:errcheck // ends with ErrServerClosed on stop
	return ln.Addr().String(), func() { srv.Close() }, nil
}
