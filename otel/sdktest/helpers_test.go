package sdktest

import (
	"context"
	"sort"
	"strconv"
	"strings"
	"testing"

	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	fgotel "github.com/floodgate-go/floodgate/otel"
)

// harness is an Observer wired to a real SDK tracer provider (with a span
// recorder) and meter provider (with a manual reader).
type harness struct {
	obs    *fgotel.Observer
	rec    *tracetest.SpanRecorder
	tp     *sdktrace.TracerProvider
	reader *sdkmetric.ManualReader
}

func newHarness(t testing.TB, opts ...fgotel.Option) *harness {
	t.Helper()
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec), sdktrace.WithSampler(sdktrace.AlwaysSample()))
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	t.Cleanup(func() {
		_ = tp.Shutdown(context.Background())
		_ = mp.Shutdown(context.Background())
	})
	opts = append([]fgotel.Option{fgotel.WithTracerProvider(tp), fgotel.WithMeterProvider(mp),
		fgotel.WithKeyHashSecret([]byte("0123456789abcdef-test-secret"))}, opts...)
	obs, err := fgotel.New(opts...)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return &harness{obs: obs, rec: rec, tp: tp, reader: reader}
}

// collect reads every metric of the floodgate scope, by name.
func (h *harness) collect(t testing.TB) map[string]metricdata.Metrics {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := h.reader.Collect(context.Background(), &rm); err != nil {
		t.Fatalf("Collect: %v", err)
	}
	out := map[string]metricdata.Metrics{}
	for _, sm := range rm.ScopeMetrics {
		if sm.Scope.Name != fgotel.ScopeName {
			continue
		}
		if sm.Scope.Version != fgotel.Version {
			t.Errorf("scope version = %q, want %q", sm.Scope.Version, fgotel.Version)
		}
		for _, m := range sm.Metrics {
			out[m.Name] = m
		}
	}
	return out
}

// sumPoints renders the points of an int64 Sum as "attrs=value" lines,
// sorted, so a test can compare the whole metric at once.
func sumPoints(t testing.TB, m metricdata.Metrics) []string {
	t.Helper()
	s, ok := m.Data.(metricdata.Sum[int64])
	if !ok {
		t.Fatalf("%s: data is %T, want Sum[int64]", m.Name, m.Data)
	}
	var out []string
	for _, dp := range s.DataPoints {
		out = append(out, dp.Attributes.Encoded(attribute.DefaultEncoder())+"="+strconv.FormatInt(dp.Value, 10))
	}
	sort.Strings(out)
	return out
}

func gaugePoints(t testing.TB, m metricdata.Metrics) []string {
	t.Helper()
	g, ok := m.Data.(metricdata.Gauge[int64])
	if !ok {
		t.Fatalf("%s: data is %T, want Gauge[int64]", m.Name, m.Data)
	}
	var out []string
	for _, dp := range g.DataPoints {
		out = append(out, dp.Attributes.Encoded(attribute.DefaultEncoder())+"="+strconv.FormatInt(dp.Value, 10))
	}
	sort.Strings(out)
	return out
}

func equalLines(t testing.TB, what string, got, want []string) {
	t.Helper()
	sort.Strings(want)
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("%s:\n got:\n  %s\nwant:\n  %s", what, strings.Join(got, "\n  "), strings.Join(want, "\n  "))
	}
}

// attrMap renders attributes as key -> Emit() value.
func attrMap(kvs []attribute.KeyValue) map[string]string {
	m := make(map[string]string, len(kvs))
	for _, kv := range kvs {
		m[string(kv.Key)] = kv.Value.Type().String() + ":" + kv.Value.String()
	}
	return m
}

func equalAttrs(t testing.TB, what string, got []attribute.KeyValue, want map[string]string) {
	t.Helper()
	g := attrMap(got)
	for k, v := range want {
		if g[k] != v {
			t.Errorf("%s: %s = %q, want %q", what, k, g[k], v)
		}
	}
	for k, v := range g {
		if _, ok := want[k]; !ok {
			t.Errorf("%s: unexpected attribute %s = %q", what, k, v)
		}
	}
}

// enc renders an attribute set the way the points helpers do.
func enc(kvs ...attribute.KeyValue) string {
	s := attribute.NewSet(kvs...)
	return s.Encoded(attribute.DefaultEncoder())
}
