package guard

import (
	"context"
	"strings"
	"testing"
	"time"

	v3orcapb "github.com/cncf/xds/go/xds/data/orca/v3"
	v3orcaservicegrpc "github.com/cncf/xds/go/xds/service/orca/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/floodgate-go/floodgate/internal/testpb"
	"github.com/floodgate-go/floodgate/testing/clock"
)

// holder's Plain holds a call whose message is "hold" until release is
// closed, telling entered when it is in the handler.
type holder struct {
	testpb.UnimplementedEchoServer
	entered chan struct{}
	release chan struct{}
}

func (h holder) Plain(_ context.Context, in *testpb.EchoRequest) (*testpb.EchoResponse, error) {
	if in.GetMessage() == "hold" {
		h.entered <- struct{}{}
		<-h.release
	}
	return &testpb.EchoResponse{Message: in.GetMessage()}, nil
}

// trailerReport is the ORCA per-call report in a call's trailer.
func trailerReport(t *testing.T, md metadata.MD) *v3orcapb.OrcaLoadReport {
	t.Helper()
	v := md.Get("endpoint-load-metrics-bin")
	if len(v) != 1 {
		t.Fatalf("trailer %v: want one endpoint-load-metrics-bin", md)
	}
	r := &v3orcapb.OrcaLoadReport{}
	if err := proto.Unmarshal([]byte(v[0]), r); err != nil {
		t.Fatal(err)
	}
	return r
}

// TestLoadReports holds calls in flight on a shedder of capacity 10 that
// sheds from 5, and reads what a client is told: every call's trailer
// and the out-of-band stream carry the utilisation the arrivals saw, the
// requests and the refusals per second.
func TestLoadReports(t *testing.T) {
	t.Parallel()
	clk := clock.New(time.Unix(1000, 0))
	g, err := New(context.Background(), WithInProcess(), WithLogger(quiet), WithLoadReports(), withClock(clk),
		WithPolicy([]byte(`
rules: []
shedder: {capacity: 10, thresholds: {test: 0.5, read: 0.5, write: 0.5}}
`)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { g.Close(context.Background()) }) // after the server stops (serveLoopback)
	srv := grpc.NewServer(g.ServerOptions()...)
	h := holder{entered: make(chan struct{}), release: make(chan struct{})}
	testpb.RegisterEchoServer(srv, h)
	if err := g.RegisterLoadReports(srv); err != nil {
		t.Fatal(err)
	}
	conn := serveLoopback(t, srv)
	client := testpb.NewEchoClient(conn)

	// Five calls held one after the other: their arrivals saw 0, 1, 2, 3
	// and 4 in flight of 10.
	held := make(chan error, 5)
	for range 5 {
		go func() {
			_, err := client.Plain(context.Background(), &testpb.EchoRequest{Message: "hold"})
			held <- err
		}()
		select {
		case <-h.entered:
		case <-time.After(10 * time.Second):
			t.Fatal("a held call never reached the handler")
		}
	}
	// The sixth sees 5 in flight, the write threshold: shed.
	clk.Advance(500 * time.Millisecond)
	var trailer metadata.MD
	_, err = client.Plain(context.Background(), &testpb.EchoRequest{Message: "hi"}, grpc.Trailer(&trailer))
	if status.Code(err) != codes.Unavailable {
		t.Fatalf("sixth call: %v, want Unavailable (shed)", err)
	}
	// Six arrivals in 500ms, one refused; the mean utilisation they saw
	// is (0+0.1+0.2+0.3+0.4+0.5)/6.
	r := trailerReport(t, trailer)
	if r.ApplicationUtilization != 0.25 || r.RpsFractional != 12 || r.Eps != 2 || r.CpuUtilization != 0 {
		t.Errorf("shed call's report: %v, want application_utilization 0.25, rps_fractional 12, eps 2", r)
	}
	want := LoadReport{Utilization: 0.25, Stage: "shedder", QPS: 12, EPS: 2, Window: 500 * time.Millisecond}
	if got := g.LoadReport(); got != want {
		t.Errorf("LoadReport %+v, want %+v", got, want)
	}

	// Out of band: the first report comes as the stream opens, and the
	// stream is not shed though a call now would be (the interceptor
	// exempts the ORCA service, as it does health checks).
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	stream, err := v3orcaservicegrpc.NewOpenRcaServiceClient(conn).StreamCoreMetrics(ctx, &v3orcaservicegrpc.OrcaLoadReportRequest{})
	if err != nil {
		t.Fatal(err)
	}
	oob, err := stream.Recv()
	if err != nil {
		t.Fatal(err)
	}
	if oob.ApplicationUtilization != 0.25 || oob.RpsFractional != 12 || oob.Eps != 2 {
		t.Errorf("out-of-band report: %v, want application_utilization 0.25, rps_fractional 12, eps 2", oob)
	}
	cancel()

	// The window closes after 1s, at the first report asked for: the
	// held calls' trailers. An admitted call's trailer carries it too.
	clk.Advance(500 * time.Millisecond)
	close(h.release)
	for range 5 {
		if err := <-held; err != nil {
			t.Fatalf("held call: %v", err)
		}
	}
	trailer = nil
	if _, err := client.Plain(context.Background(), &testpb.EchoRequest{Message: "hi"}, grpc.Trailer(&trailer)); err != nil {
		t.Fatal(err)
	}
	r = trailerReport(t, trailer)
	want = LoadReport{Utilization: 0.25, Stage: "shedder", QPS: 6, EPS: 1, Window: time.Second}
	if got := g.LoadReport(); got != want {
		t.Errorf("LoadReport after 1s %+v, want %+v", got, want)
	}
	if r.ApplicationUtilization != 0.25 || r.RpsFractional != 6 || r.Eps != 1 {
		t.Errorf("admitted call's report: %v, want %+v", r, want)
	}
}

// TestLoadReportsOff: without WithLoadReports no trailer carries a
// report, LoadReport is zero and RegisterLoadReports says what it needs.
func TestLoadReportsOff(t *testing.T) {
	t.Parallel()
	g, err := New(context.Background(), WithInProcess(), WithLogger(quiet), WithPolicy([]byte("rules: []\nshedder: {capacity: 10}")))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { g.Close(context.Background()) }) // after the server stops (serveLoopback)
	srv := grpc.NewServer(g.ServerOptions()...)
	testpb.RegisterEchoServer(srv, echo{})
	err = g.RegisterLoadReports(srv)
	if err == nil || err.Error() != "guard: RegisterLoadReports needs WithLoadReports" {
		t.Errorf("RegisterLoadReports: %v", err)
	}
	conn := serveLoopback(t, srv)
	var trailer metadata.MD
	if _, err := testpb.NewEchoClient(conn).Plain(context.Background(), &testpb.EchoRequest{Message: "hi"}, grpc.Trailer(&trailer)); err != nil {
		t.Fatal(err)
	}
	for k := range trailer {
		if strings.HasPrefix(k, "endpoint-load-metrics") {
			t.Errorf("trailer carries %s without WithLoadReports", k)
		}
	}
	if got := g.LoadReport(); got != (LoadReport{}) {
		t.Errorf("LoadReport %+v, want zero", got)
	}
}
