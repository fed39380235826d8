package interceptor

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/internal/testpb"
)

// TestUnaryResult checks what every admitted stage's Done is told: the
// outcome classified from the handler's error and the cost the handler
// reported.
func TestUnaryResult(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		code codes.Code
		want floodgate.Outcome
	}{
		{codes.OK, floodgate.OutcomeSuccess},
		{codes.InvalidArgument, floodgate.OutcomeFailed},
		{codes.Internal, floodgate.OutcomeFailed},
		{codes.DeadlineExceeded, floodgate.OutcomeDropped},
		{codes.ResourceExhausted, floodgate.OutcomeDropped},
		{codes.Unavailable, floodgate.OutcomeDropped},
		{codes.Canceled, floodgate.OutcomeIgnored},
	} {
		t.Run(tc.code.String(), func(t *testing.T) {
			s := &stage{}
			handler := func(ctx context.Context, _ any, _ *grpc.UnaryServerInfo, _ grpc.UnaryHandler) (any, error) {
				if err := floodgate.ReportCost(ctx, 7); err != nil {
					t.Error(err)
				}
				if tc.code == codes.OK {
					return &testpb.EchoResponse{}, nil
				}
				return nil, status.Error(tc.code, "from the handler")
			}
			c := unaryServer(t, &echoServer{}, mustUnary(s), handler)
			_, _ = c.Plain(testCtx(t), &testpb.EchoRequest{Message: "x"})
			got := s.finished()
			want := floodgate.Result{Outcome: tc.want, Cost: 7, HasCost: true}
			if len(got) != 1 || got[0] != want {
				t.Fatalf("Done got %+v, want [%+v]", got, want)
			}
		})
	}
}

// TestUnaryResultWithoutReportedCost: a handler that reports nothing leaves
// the charge as it was (HasCost false).
func TestUnaryResultWithoutReportedCost(t *testing.T) {
	t.Parallel()
	s := &stage{}
	c := unaryServer(t, &echoServer{}, mustUnary(s))
	if _, err := c.Plain(testCtx(t), &testpb.EchoRequest{Message: "x"}); err != nil {
		t.Fatal(err)
	}
	if got := s.finished(); len(got) != 1 || got[0] != (floodgate.Result{}) {
		t.Fatalf("Done got %+v, want one zero Result", got)
	}
}

func TestUnaryPanicIsIgnored(t *testing.T) {
	t.Parallel()
	s := &stage{}
	recovery := func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (resp any, err error) {
		defer func() {
			if p := recover(); p != nil {
				err = status.Error(codes.Aborted, "recovered")
			}
		}()
		return h(ctx, req)
	}
	c := unaryServer(t, &echoServer{panicOn: "boom"}, recovery, mustUnary(s))
	_, _ = c.Plain(testCtx(t), &testpb.EchoRequest{Message: "boom"})
	if got := s.finished(); len(got) != 1 || got[0].Outcome != floodgate.OutcomeIgnored {
		t.Fatalf("Done got %+v, want one OutcomeIgnored", got)
	}
}

// TestChainDenialIsIgnored: when a later stage denies, the stages already
// passed are told floodgate.Ignored (refund, no sample), through the
// interceptors as through a Chain.
func TestChainDenialIsIgnored(t *testing.T) {
	t.Parallel()
	first := &stage{}
	second := &stage{decide: deny(floodgate.Decision{Stage: floodgate.StageTiers, Policy: "p"})}
	c := unaryServer(t, &echoServer{}, mustUnary(first), mustUnary(second))
	if _, err := c.Plain(testCtx(t), &testpb.EchoRequest{Message: "x"}); status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("err %v, want ResourceExhausted", err)
	}
	c = unaryServer(t, &echoServer{}, mustUnary(floodgate.Chain{first, second}))
	if _, err := c.Plain(testCtx(t), &testpb.EchoRequest{Message: "x"}); status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("err %v, want ResourceExhausted", err)
	}
	// Separate interceptors: the first stage's Done runs when the call
	// returns the second's deny, which it knows for a stage's denial
	// (not an overload: it was Dropped before). Chain: the Chain releases
	// the passed stage with Ignored. Both alike.
	got := first.finished()
	want := []floodgate.Result{floodgate.Ignored, floodgate.Ignored}
	if len(got) != 2 || got[0] != want[0] || got[1] != want[1] {
		t.Fatalf("first stage's Dones got %+v, want %+v", got, want)
	}
}

func TestStreamResult(t *testing.T) {
	t.Parallel()
	s := &stage{}
	failing := func(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, _ grpc.StreamHandler) error {
		if err := floodgate.ReportCost(ss.Context(), 3); err != nil {
			t.Error(err)
		}
		return status.Error(codes.Unavailable, "dependency down")
	}
	cc := startBufconn(t, &echoServer{}, []grpc.ServerOption{grpc.ChainStreamInterceptor(mustStream(s), failing)})
	st, err := testpb.NewEchoClient(cc).ServerStream(testCtx(t), &testpb.EchoRequest{Message: "x"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.Recv(); status.Code(err) != codes.Unavailable {
		t.Fatalf("Recv err %v, want Unavailable", err)
	}
	waitFor(t, "the stream's Done", func() bool { return len(s.finished()) == 1 })
	want := floodgate.Result{Outcome: floodgate.OutcomeDropped, Cost: 3, HasCost: true}
	if got := s.finished()[0]; got != want {
		t.Fatalf("Done got %+v, want %+v", got, want)
	}
}

func TestHTTPResult(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		status int // 0: the handler writes nothing
		want   floodgate.Outcome
	}{
		{"nothing written", 0, floodgate.OutcomeSuccess},
		{"201", http.StatusCreated, floodgate.OutcomeSuccess},
		{"404", http.StatusNotFound, floodgate.OutcomeFailed},
		{"500", http.StatusInternalServerError, floodgate.OutcomeFailed},
		{"429", http.StatusTooManyRequests, floodgate.OutcomeDropped},
		{"503", http.StatusServiceUnavailable, floodgate.OutcomeDropped},
		{"504", http.StatusGatewayTimeout, floodgate.OutcomeDropped},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := &stage{}
			h := mustHTTP(s, WithRoute(func(*http.Request) string { return "GET /x" }))(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if err := floodgate.ReportCost(r.Context(), 11); err != nil {
					t.Error(err)
				}
				if _, ok := w.(http.Flusher); !ok {
					t.Error("the middleware's ResponseWriter hides http.Flusher")
				}
				if tc.status != 0 {
					w.WriteHeader(tc.status)
				}
			}))
			h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest("GET", "/x", nil))
			want := floodgate.Result{Outcome: tc.want, Cost: 11, HasCost: true}
			if got := s.finished(); len(got) != 1 || got[0] != want {
				t.Fatalf("Done got %+v, want [%+v]", got, want)
			}
		})
	}
}

func TestHTTPClientGoneIsIgnored(t *testing.T) {
	t.Parallel()
	s := &stage{}
	ctx, cancel := context.WithCancel(context.Background())
	h := mustHTTP(s, WithRoute(func(*http.Request) string { return "GET /x" }))(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {
		cancel() // the client goes away while the handler runs
	}))
	h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest("GET", "/x", nil).WithContext(ctx))
	if got := s.finished(); len(got) != 1 || got[0].Outcome != floodgate.OutcomeIgnored {
		t.Fatalf("Done got %+v, want one OutcomeIgnored", got)
	}
}

// checkMeters fails unless res carries the default meter's cost 5 and the
// named meters input_tokens 120 and output_tokens 7, as reported.
func checkMeters(t *testing.T, res floodgate.Result) {
	t.Helper()
	if !res.HasCost || res.Cost != 5 || res.Meters == nil {
		t.Fatalf("Done got %+v, want cost 5 and meters", res)
	}
	for name, want := range map[string]int64{"input_tokens": 120, "output_tokens": 7} {
		if got, ok := res.Meters.Meter(name); !ok || got != want {
			t.Errorf("Meters.Meter(%q) = %d, %v; want %d, true", name, got, ok, want)
		}
	}
}

// reportMeters reports what checkMeters expects, the output tokens
// twice (the last report counts).
func reportMeters(t *testing.T, ctx context.Context) {
	for _, m := range []struct {
		name string
		n    int64
	}{{"input_tokens", 120}, {"output_tokens", 1}, {"", 5}, {"output_tokens", 7}} {
		if err := floodgate.ReportMeter(ctx, m.name, m.n); err != nil {
			t.Error(err)
		}
	}
}

// TestMetersReachDone: what a handler reports with floodgate.ReportMeter
// reaches every stage's Done in Result.Meters, over HTTP and gRPC; a
// handler that reports no meter leaves Meters nil.
func TestMetersReachDone(t *testing.T) {
	t.Parallel()
	s := &stage{}
	route := WithRoute(func(*http.Request) string { return "GET /x" })
	h := mustHTTP(s, route)(http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) { reportMeters(t, r.Context()) }))
	h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest("GET", "/x", nil))
	if got := s.finished(); len(got) != 1 {
		t.Fatalf("%d Dones, want 1", len(got))
	} else {
		checkMeters(t, got[0])
	}

	g := &stage{}
	handler := func(ctx context.Context, _ any, _ *grpc.UnaryServerInfo, _ grpc.UnaryHandler) (any, error) {
		reportMeters(t, ctx)
		return &testpb.EchoResponse{}, nil
	}
	c := unaryServer(t, &echoServer{}, mustUnary(g), handler)
	if _, err := c.Plain(testCtx(t), &testpb.EchoRequest{Message: "x"}); err != nil {
		t.Fatal(err)
	}
	if got := g.finished(); len(got) != 1 {
		t.Fatalf("%d Dones, want 1", len(got))
	} else {
		checkMeters(t, got[0])
	}

	n := &stage{}
	mustHTTP(n, route)(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {})).ServeHTTP(httptest.NewRecorder(), httptest.NewRequest("GET", "/x", nil))
	if got := n.finished(); len(got) != 1 || got[0] != (floodgate.Result{}) {
		t.Fatalf("a handler that reported nothing: Dones %+v, want [{}]", got)
	}
}
