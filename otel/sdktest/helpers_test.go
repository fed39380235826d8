package sdktest

import (
	"context"
	"net"
	"sort"
	"strconv"
	"strings"
	"testing"

	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"

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

// serveGRPC registers the gRPC test service (answering Unimplemented) on
// srv, serves it on a loopback port until the test ends, and returns a
// client of it.
func serveGRPC(t testing.TB, srv *grpc.Server) testgrpc.TestServiceClient {
	t.Helper()
	testgrpc.RegisterTestServiceServer(srv, &testgrpc.UnimplementedTestServiceServer{})
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return testgrpc.NewTestServiceClient(conn)
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

// The int64 metric kinds intPoints reads.
type (
	sum   = metricdata.Sum[int64]
	gauge = metricdata.Gauge[int64]
)

// intPoints renders the points of m, an int64 metric of kind D, as
// "attrs=value" lines, sorted, so a test can compare the whole metric at
// once.
func intPoints[D sum | gauge](t testing.TB, m metricdata.Metrics) []string {
	t.Helper()
	var dps []metricdata.DataPoint[int64]
	switch d := m.Data.(type) {
	case sum:
		dps = d.DataPoints
	case gauge:
		dps = d.DataPoints
	}
	if _, ok := m.Data.(D); !ok {
		t.Fatalf("%s: data is %T, want %T", m.Name, m.Data, *new(D))
	}
	out := make([]string, 0, len(dps))
	for _, dp := range dps {
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
