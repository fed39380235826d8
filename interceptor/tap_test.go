package interceptor

import (
	"context"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/internal/testpb"
	"github.com/floodgate-go/floodgate/shedder"
)

// countingCodec is the proto codec, counting the messages the server
// decodes.
type countingCodec struct {
	encoding.CodecV2
	decoded atomic.Int64
}

func (c *countingCodec) Unmarshal(data mem.BufferSlice, v any) error {
	c.decoded.Add(1)
	return c.CodecV2.Unmarshal(data, v)
}

func newCountingCodec() *countingCodec {
	return &countingCodec{CodecV2: encoding.GetCodecV2("proto")}
}

// countingInterceptor counts the calls that reach the interceptors.
func countingInterceptor(n *atomic.Int64) grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		n.Add(1)
		return h(ctx, req)
	}
}

// TestTapDenySameStatusNothingDecoded refuses a call at the tap with the
// status the unary interceptor sends for the same denial, without decoding
// its message or reaching an interceptor.
func TestTapDenySameStatusNothingDecoded(t *testing.T) {
	t.Parallel()
	d := floodgate.Decision{Stage: floodgate.StageShedder, Source: floodgate.SourceShedder, Policy: "shedder", Limit: 64, RetryAfter: 1234567 * time.Microsecond}
	req := &testpb.EchoRequest{Message: strings.Repeat("x", 64<<10)}

	// Today: the interceptor refuses the decoded call.
	before := &stage{decide: deny(d)}
	codec0 := newCountingCodec()
	var reached0 atomic.Int64
	c0 := testpb.NewEchoClient(startLoopback(t, &echoServer{}, []grpc.ServerOption{
		grpc.ForceServerCodecV2(codec0),
		grpc.ChainUnaryInterceptor(countingInterceptor(&reached0), mustUnary(before, WithDomain("search.example.com"))),
	}))
	_, err0 := c0.Plain(testCtx(t), req)
	if reached0.Load() != 1 || codec0.decoded.Load() != 1 {
		t.Fatalf("without the tap: reached %d decoded %d, want 1 1", reached0.Load(), codec0.decoded.Load())
	}

	s := &stage{decide: deny(d)}
	fg := MustNew(WithDomain("search.example.com"))
	codec := newCountingCodec()
	var reached atomic.Int64
	c := testpb.NewEchoClient(startLoopback(t, &echoServer{}, []grpc.ServerOption{
		grpc.ForceServerCodecV2(codec),
		grpc.InTapHandle(fg.TapHandle(s)),
		grpc.ChainUnaryInterceptor(countingInterceptor(&reached), fg.UnaryServer(s)),
	}))
	_, err := c.Plain(testCtx(t), req)
	st, st0 := status.Convert(err), status.Convert(err0)
	if st.Code() != codes.Unavailable || !proto.Equal(st.Proto(), st0.Proto()) {
		t.Fatalf("status at the tap = %v, want %v", st.Proto(), st0.Proto())
	}
	if reached.Load() != 0 || codec.decoded.Load() != 0 {
		t.Errorf("with the tap: reached %d decoded %d, want 0 0", reached.Load(), codec.decoded.Load())
	}
	if s.admits.Load() != 1 || s.held.Load() != 0 {
		t.Errorf("admits %d held %d, want 1 0", s.admits.Load(), s.held.Load())
	}
}

// tapped serves e with first decided at the tap and chain in the unary and
// stream interceptors (one Interceptor).
func tapped(t *testing.T, e *echoServer, first floodgate.Admitter, chain floodgate.Admitter, opts ...Option) *grpc.ClientConn {
	t.Helper()
	fg := MustNew(opts...)
	return startLoopback(t, e, []grpc.ServerOption{
		grpc.InTapHandle(fg.TapHandle(first)),
		grpc.ChainUnaryInterceptor(fg.UnaryServer(chain)),
		grpc.ChainStreamInterceptor(fg.StreamServer(chain)),
	})
}

// TestTapAdmitsOnce: a call the tap admitted is not admitted again by the
// interceptor, and its Done gets what it would get without the tap, once:
// the outcome, or floodgate.Ignored when a later stage denies.
func TestTapAdmitsOnce(t *testing.T) {
	t.Parallel()
	allowShed := func(*floodgate.Request) (floodgate.Decision, error) {
		return floodgate.Decision{Allowed: true, Stage: floodgate.StageShedder}, nil
	}
	later := deny(floodgate.Decision{Stage: floodgate.StageTiers, Policy: "p", RetryAfter: time.Second})
	run := func(t *testing.T, tap bool, msg string, laterDenies bool) (*stage, error) {
		first := &stage{decide: allowShed}
		second := &stage{}
		if laterDenies {
			second.decide = later
		}
		chain := floodgate.Chain{first, second}
		var cc *grpc.ClientConn
		e := &echoServer{}
		if tap {
			cc = tapped(t, e, first, chain)
		} else {
			cc = startLoopback(t, e, []grpc.ServerOption{grpc.ChainUnaryInterceptor(mustUnary(chain))})
		}
		_, err := testpb.NewEchoClient(cc).Plain(testCtx(t), &testpb.EchoRequest{Message: msg})
		return first, err
	}
	for _, tc := range []struct {
		name        string
		msg         string
		laterDenies bool
		code        codes.Code
	}{
		{"success", "ok", false, codes.OK},
		{"later stage denies", "ok", true, codes.ResourceExhausted},
	} {
		t.Run(tc.name, func(t *testing.T) {
			want, err0 := run(t, false, tc.msg, tc.laterDenies)
			got, err := run(t, true, tc.msg, tc.laterDenies)
			if status.Code(err) != tc.code || status.Code(err0) != tc.code {
				t.Fatalf("codes %v %v, want %v", status.Code(err0), status.Code(err), tc.code)
			}
			if got.admits.Load() != 1 || got.dones.Load() != 1 || got.held.Load() != 0 {
				t.Errorf("admits %d dones %d held %d, want 1 1 0", got.admits.Load(), got.dones.Load(), got.held.Load())
			}
			g, w := got.finished(), want.finished()
			if len(g) != 1 || len(w) != 1 || g[0] != w[0] {
				t.Errorf("Done results %+v, want %+v (without the tap)", g, w)
			}
		})
	}
}

// TestTapDoneOnPanic: a handler's panic, recovered by an interceptor
// before the chain's, ends the tap's admission once.
func TestTapDoneOnPanic(t *testing.T) {
	t.Parallel()
	s := &stage{decide: func(*floodgate.Request) (floodgate.Decision, error) {
		return floodgate.Decision{Allowed: true, Stage: floodgate.StageShedder}, nil
	}}
	recovery := func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (resp any, err error) {
		defer func() {
			if p := recover(); p != nil {
				err = status.Error(codes.Aborted, "recovered")
			}
		}()
		return h(ctx, req)
	}
	fg := MustNew()
	cc := startLoopback(t, &echoServer{panicOn: "boom"}, []grpc.ServerOption{
		grpc.InTapHandle(fg.TapHandle(s)),
		grpc.ChainUnaryInterceptor(recovery, fg.UnaryServer(s)),
	})
	_, err := testpb.NewEchoClient(cc).Plain(testCtx(t), &testpb.EchoRequest{Message: "boom"})
	if status.Code(err) != codes.Aborted {
		t.Fatalf("err = %v, want the recovered panic", err)
	}
	if s.admits.Load() != 1 || s.dones.Load() != 1 || s.held.Load() != 0 {
		t.Errorf("admits %d dones %d held %d, want 1 1 0", s.admits.Load(), s.dones.Load(), s.held.Load())
	}
	if got := s.finished(); len(got) != 1 || got[0].Outcome != floodgate.OutcomeIgnored {
		t.Errorf("Done results %+v, want one OutcomeIgnored", got)
	}
}

// TestTapShedderInFlight: with the real shedder at the tap and in the
// chain, an admitted call holds one slot while it runs (unary and stream)
// and none after.
func TestTapShedderInFlight(t *testing.T) {
	t.Parallel()
	shed, err := shedder.New(4)
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var during []int64
	probe := &stage{decide: func(*floodgate.Request) (floodgate.Decision, error) {
		mu.Lock()
		during = append(during, shed.InFlight())
		mu.Unlock()
		return floodgate.Decision{Allowed: true, Stage: floodgate.StageConcurrency}, nil
	}}
	cc := tapped(t, &echoServer{}, shed, floodgate.Chain{shed, probe})
	c := testpb.NewEchoClient(cc)
	if _, err := c.Plain(testCtx(t), &testpb.EchoRequest{Message: "a"}); err != nil {
		t.Fatal(err)
	}
	ss, err := c.ServerStream(testCtx(t), &testpb.EchoRequest{Message: "b"})
	if err != nil {
		t.Fatal(err)
	}
	for range 3 {
		if _, err := ss.Recv(); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, "the shedder's slots back", func() bool { return shed.InFlight() == 0 })
	mu.Lock()
	defer mu.Unlock()
	if len(during) != 2 || during[0] != 1 || during[1] != 1 {
		t.Errorf("in flight while admitted = %v, want [1 1]", during)
	}
	if probe.dones.Load() != 2 {
		t.Errorf("probe dones %d, want 2", probe.dones.Load())
	}
}

// TestTapReleasesUnclaimed: a call the tap admitted that never reaches the
// interceptor (an unknown method) is released as floodgate.Ignored when
// its stream ends.
func TestTapReleasesUnclaimed(t *testing.T) {
	t.Parallel()
	s := &stage{decide: func(*floodgate.Request) (floodgate.Decision, error) {
		return floodgate.Decision{Allowed: true, Stage: floodgate.StageShedder}, nil
	}}
	cc := tapped(t, &echoServer{}, s, s)
	err := cc.Invoke(testCtx(t), "/floodgate.test.v1.Echo/Nope", &testpb.EchoRequest{}, &testpb.EchoResponse{})
	if status.Code(err) != codes.Unimplemented {
		t.Fatalf("err = %v, want Unimplemented", err)
	}
	waitFor(t, "the admission released", func() bool { return s.dones.Load() == 1 })
	if got := s.finished(); len(got) != 1 || got[0] != floodgate.Ignored {
		t.Errorf("Done results %+v, want [floodgate.Ignored]", got)
	}
	if s.admits.Load() != 1 || s.held.Load() != 0 {
		t.Errorf("admits %d held %d, want 1 0", s.admits.Load(), s.held.Load())
	}
}

// TestTapObserved: the observers see the tap's decision once, then the
// interceptor's other stages.
func TestTapObserved(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var got []string
	obs := floodgate.ObserverFunc(func(_ context.Context, _ *floodgate.Request, d floodgate.Decision, _ error) {
		mu.Lock()
		got = append(got, string(d.Stage)+"/"+boolStr(d.Allowed))
		mu.Unlock()
	})
	var shedOK atomic.Bool
	shedOK.Store(true)
	shed := &stage{decide: func(*floodgate.Request) (floodgate.Decision, error) {
		return floodgate.Decision{Allowed: shedOK.Load(), Stage: floodgate.StageShedder, RetryAfter: time.Second}, nil
	}}
	conc := &stage{decide: func(*floodgate.Request) (floodgate.Decision, error) {
		return floodgate.Decision{Allowed: true, Stage: floodgate.StageConcurrency}, nil
	}}
	c := testpb.NewEchoClient(tapped(t, &echoServer{}, shed, floodgate.Chain{shed, conc}, WithObserver(obs)))
	if _, err := c.Plain(testCtx(t), &testpb.EchoRequest{}); err != nil {
		t.Fatal(err)
	}
	shedOK.Store(false)
	if _, err := c.Plain(testCtx(t), &testpb.EchoRequest{}); status.Code(err) != codes.Unavailable {
		t.Fatalf("err = %v, want Unavailable", err)
	}
	mu.Lock()
	defer mu.Unlock()
	if s := strings.Join(got, ","); s != "shedder/true,concurrency/true,shedder/false" {
		t.Errorf("observed %s", s)
	}
}

// TestTapHealthPassesThrough: health checks and skipped methods pass the
// tap untouched.
func TestTapHealthPassesThrough(t *testing.T) {
	t.Parallel()
	s := &stage{decide: deny(floodgate.Decision{Stage: floodgate.StageShedder, RetryAfter: time.Second})}
	cc := tapped(t, &echoServer{}, s, s, WithSkip(func(m string) bool { return m == "/floodgate.test.v1.Echo/Expensive" }))
	resp, err := healthpb.NewHealthClient(cc).Check(testCtx(t), &healthpb.HealthCheckRequest{})
	if err != nil || resp.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("health Check = %v, %v", resp, err)
	}
	if _, err := testpb.NewEchoClient(cc).Expensive(testCtx(t), &testpb.EchoRequest{}); err != nil {
		t.Fatalf("skipped method: %v", err)
	}
	if s.admits.Load() != 0 {
		t.Errorf("admits = %d, want 0", s.admits.Load())
	}
}

// A tap's denial is built once for a run of identical decisions (the
// status reads no in-flight count) and again when the decision changes;
// with a custom deny message, which may read anything, never reused.
func TestTapDenialReused(t *testing.T) {
	fg, err := New()
	if err != nil {
		t.Fatal(err)
	}
	ts := &tapStage{}
	shed := floodgate.Decision{Stage: floodgate.StageShedder, Policy: "shedder", Limit: 10, RetryAfter: time.Second}
	e1 := ts.denial(fg, context.Background(), shed)
	shed.Remaining = 3
	if e2 := ts.denial(fg, context.Background(), shed); e2 != e1 {
		t.Fatal("an identical denial built its status again")
	}
	fairly := shed
	fairly.Policy = "shedder.fairness"
	e3 := ts.denial(fg, context.Background(), fairly)
	if e3 == e1 || !strings.Contains(status.Convert(e3).Message(), `"shedder.fairness"`) {
		t.Fatalf("another policy's denial: %v", e3)
	}
	e4 := ts.denial(fg, context.Background(), shed)
	if e4 == e3 || status.Convert(e4).Message() != status.Convert(e1).Message() {
		t.Fatalf("back to the first decision: %v, want %v", e4, e1)
	}
	custom, err := New(WithDenyResponse(DenyResponse{Message: func(_ context.Context, d floodgate.Decision) string { return d.Policy }}))
	if err != nil {
		t.Fatal(err)
	}
	ts = &tapStage{}
	if a, b := ts.denial(custom, context.Background(), shed), ts.denial(custom, context.Background(), shed); a == b {
		t.Fatal("a custom message's denial was reused")
	}
}
