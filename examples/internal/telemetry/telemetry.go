// Package telemetry is the example services' OpenTelemetry SDK: a meter
// provider exported to Prometheus on a port of its own, a tracer provider
// that prints spans with -trace, and two gauges of what the overload
// stages hold. What it decides: the examples' telemetry wiring, which a
// real service makes its own (package guard takes any providers).
package telemetry

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

// Telemetry is a service's OpenTelemetry SDK: a meter provider whose
// Prometheus exporter has a registry of its own, served on a port of its
// own, and a tracer provider that prints every span as a line of JSON
// with -trace, written synchronously (for watching a run, not for
// production, where a batching OTLP exporter belongs) and samples none
// without it. guard records floodgate's metrics and span attributes on
// both (guard.WithMeterProvider, WithTracerProvider); otelhttp and
// otelgrpc their own.
type Telemetry struct {
	// MP and TP are the providers, for guard and the transport's own
	// instrumentation.
	MP *sdkmetric.MeterProvider
	TP *sdktrace.TracerProvider
	// Metrics serves the Prometheus exposition of every metric.
	Metrics http.Handler
	// service names the meter of the stage gauges.
	service string
}

// New builds the providers of the example service (its import path
// names the meter); traces, when not nil, receives every span.
func New(service string, traces io.Writer) (*Telemetry, error) {
	reg := promclient.NewRegistry()
	exporter, err := promexporter.New(promexporter.WithRegisterer(reg))
	if err != nil {
		return nil, fmt.Errorf("prometheus exporter: %w", err)
	}
	t := &Telemetry{
		MP:      sdkmetric.NewMeterProvider(sdkmetric.WithReader(exporter)),
		TP:      sdktrace.NewTracerProvider(sdktrace.WithSampler(sdktrace.NeverSample())),
		Metrics: promhttp.HandlerFor(reg, promhttp.HandlerOpts{}),
		service: service,
	}
	if traces != nil {
		spans, err := stdouttrace.New(stdouttrace.WithWriter(traces))
		if err != nil {
			return nil, fmt.Errorf("span exporter: %w", err)
		}
		t.TP = sdktrace.NewTracerProvider(sdktrace.WithSyncer(spans))
	}
	return t, nil
}

// Shutdown flushes and stops both providers.
func (t *Telemetry) Shutdown(ctx context.Context) error {
	return errors.Join(t.TP.Shutdown(ctx), t.MP.Shutdown(ctx))
}

// ObserveStages exports what the overload stages of chain hold now,
// found through guard's wrappers (floodgate.As), as two gauges read at
// every scrape:
//
//	shop_shedder_capacity          the shedder's capacity: the policy's, or what an adaptive one learnt
//	shop_adaptive_in_flight_limit  the adaptive in-flight limit, with the policy's concurrency: adaptive:
func (t *Telemetry) ObserveStages(chain floodgate.Admitter) (unregister func() error, err error) {
	meter := t.MP.Meter(t.service)
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

// TopPath is where ServeMetrics serves the guard's denial summary.
const TopPath = "/debug/floodgate/top"

// ServeMetrics serves h on /metrics at addr in the background, and top
// (guard.Guard.TopDeniedHandler: who is denied, for `floodgate top -url`)
// on TopPath: an admin listener, never the public one. It returns the
// address it listens on (addr may name port 0) and a function that stops
// it.
func ServeMetrics(addr string, h, top http.Handler) (string, func(), error) {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", h)
	mux.Handle("GET "+TopPath, top)
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return "", nil, fmt.Errorf("metrics listener: %w", err)
	}
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go srv.Serve(ln) //nolint:errcheck // ends with ErrServerClosed on stop
	return ln.Addr().String(), func() { srv.Close() }, nil
}
