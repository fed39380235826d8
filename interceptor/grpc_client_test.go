package interceptor

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/internal/testpb"
	"github.com/floodgate-go/floodgate/testing/clock"
)

// denyFirst denies the first n admissions with d, then allows.
func denyFirst(n int64, d floodgate.Decision) *stage {
	var calls atomic.Int64
	return &stage{decide: func(*floodgate.Request) (floodgate.Decision, error) {
		if calls.Add(1) <= n {
			return d, nil
		}
		return floodgate.Decision{Allowed: true, Stage: floodgate.StageTiers}, nil
	}}
}

type sleepRecorder struct {
	mu     sync.Mutex
	sleeps []time.Duration
}

func (s *sleepRecorder) sleep(ctx context.Context, d time.Duration) error {
	s.mu.Lock()
	s.sleeps = append(s.sleeps, d)
	s.mu.Unlock()
	return ctx.Err()
}

func (s *sleepRecorder) got() []time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]time.Duration(nil), s.sleeps...)
}

func equalDurations(a, b []time.Duration) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func clientConn(t *testing.T, s *stage, copts ...ClientOption) testpb.EchoClient {
	return testpb.NewEchoClient(startBufconn(t, &echoServer{},
		[]grpc.ServerOption{grpc.ChainUnaryInterceptor(mustUnary(s)), grpc.ChainStreamInterceptor(mustStream(s))},
		grpc.WithChainUnaryInterceptor(UnaryClient(copts...)), grpc.WithChainStreamInterceptor(StreamClient(copts...)),
		grpc.WithDisableRetry(),
	))
}

func TestClientWaitsPushbackAndSucceeds(t *testing.T) {
	t.Parallel()
	s := denyFirst(1, floodgate.Decision{Stage: floodgate.StageShedder, RetryAfter: 1500 * time.Millisecond})
	rec := &sleepRecorder{}
	c := clientConn(t, s, WithSleep(rec.sleep), WithJitter(0.2), WithRand(func() float64 { return 0.5 }))
	resp, err := c.Plain(testCtx(t), &testpb.EchoRequest{Message: "ok"})
	if err != nil || resp.GetMessage() != "ok" {
		t.Fatalf("Plain = %v, %v", resp, err)
	}
	// 1500 ms asked, + 0.5 * 0.2 * 1500 ms jitter: never earlier than asked.
	if want := []time.Duration{1650 * time.Millisecond}; !equalDurations(rec.got(), want) {
		t.Errorf("sleeps = %v, want %v", rec.got(), want)
	}
	if s.admits.Load() != 2 {
		t.Errorf("server admits = %d, want 2", s.admits.Load())
	}
}

// TestClientSleepsOnClock: given a clock with an After method
// (WithClientClock), the client waits the server's pushback on it: a call
// denied with a 30ms pushback (no jitter) is retried when the clock has
// moved 30ms, not 1ms sooner; a context that ends first ends the wait, and
// the call with the denial.
func TestClientSleepsOnClock(t *testing.T) {
	t.Parallel()
	clk := clock.New(time.Now()) // the calls' deadlines are on the system clock
	s := denyFirst(1, floodgate.Decision{Stage: floodgate.StageTiers, RetryAfter: 30 * time.Millisecond})
	c := clientConn(t, s, WithClientClock(clk), WithJitter(0))
	ctx := testCtx(t)
	ended := make(chan error, 1)
	go func() {
		_, err := c.Plain(ctx, &testpb.EchoRequest{})
		ended <- err
	}()
	waitFor(t, "the retry's wait on the clock", func() bool { return clk.Timers() == 1 })
	clk.Advance(29 * time.Millisecond)
	select {
	case err := <-ended:
		t.Fatalf("the call ended 1ms before the pushback: %v", err)
	default:
	}
	if clk.Timers() != 1 || s.admits.Load() != 1 {
		t.Fatalf("1ms before the pushback: %d timers, %d attempts; want the wait pending after 1 attempt", clk.Timers(), s.admits.Load())
	}
	clk.Advance(time.Millisecond)
	if err := <-ended; err != nil || s.admits.Load() != 2 {
		t.Fatalf("after the pushback: %v, %d attempts; want the retry admitted", err, s.admits.Load())
	}

	s = denyFirst(1, floodgate.Decision{Stage: floodgate.StageTiers, RetryAfter: 30 * time.Millisecond})
	c = clientConn(t, s, WithClientClock(clk), WithJitter(0))
	cctx, cancel := context.WithCancel(ctx)
	go func() {
		_, err := c.Plain(cctx, &testpb.EchoRequest{})
		ended <- err
	}()
	waitFor(t, "the second call's wait on the clock", func() bool { return clk.Timers() == 1 })
	cancel()
	if err := <-ended; status.Code(err) != codes.ResourceExhausted || s.admits.Load() != 1 {
		t.Fatalf("a call cancelled while it waits: %v, %d attempts; want the denial after 1 attempt", err, s.admits.Load())
	}
}

func TestClientBoundedAttempts(t *testing.T) {
	t.Parallel()
	s := denyFirst(100, floodgate.Decision{Stage: floodgate.StageTiers, Policy: "p", RetryAfter: 5 * time.Millisecond})
	rec := &sleepRecorder{}
	c := clientConn(t, s, WithSleep(rec.sleep), WithJitter(0), WithMaxAttempts(3))
	_, err := c.Plain(testCtx(t), &testpb.EchoRequest{})
	if status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("err = %v", err)
	}
	if want := []time.Duration{5 * time.Millisecond, 5 * time.Millisecond}; !equalDurations(rec.got(), want) {
		t.Errorf("sleeps = %v, want %v", rec.got(), want)
	}
	if s.admits.Load() != 3 {
		t.Errorf("attempts = %d, want 3", s.admits.Load())
	}
}

func TestClientNoRetry(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		d    floodgate.Decision
		ctx  func(context.Context) (context.Context, context.CancelFunc)
		opts []ClientOption
	}{
		{"negative pushback (RetryAfter 0)", floodgate.Decision{Stage: floodgate.StageTiers}, nil, nil},
		{"past the deadline", floodgate.Decision{Stage: floodgate.StageTiers, RetryAfter: 3 * time.Second},
			func(ctx context.Context) (context.Context, context.CancelFunc) {
				return context.WithTimeout(ctx, 2*time.Second)
			}, nil},
		{"longer than max delay", floodgate.Decision{Stage: floodgate.StageTiers, RetryAfter: time.Minute}, nil, nil},
		{"one attempt", floodgate.Decision{Stage: floodgate.StageTiers, RetryAfter: time.Millisecond}, nil, []ClientOption{WithMaxAttempts(1)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := denyFirst(1, tc.d)
			rec := &sleepRecorder{}
			c := clientConn(t, s, append([]ClientOption{WithSleep(rec.sleep), WithJitter(0)}, tc.opts...)...)
			ctx := testCtx(t)
			if tc.ctx != nil {
				var cancel context.CancelFunc
				ctx, cancel = tc.ctx(ctx)
				defer cancel()
			}
			_, err := c.Plain(ctx, &testpb.EchoRequest{})
			if status.Code(err) != codes.ResourceExhausted {
				t.Fatalf("err = %v, want the denial", err)
			}
			if len(rec.got()) != 0 || s.admits.Load() != 1 {
				t.Errorf("sleeps %v attempts %d, want none and 1", rec.got(), s.admits.Load())
			}
		})
	}
}

func TestClientStreamRetry(t *testing.T) {
	t.Parallel()
	s := denyFirst(1, floodgate.Decision{Stage: floodgate.StageShedder, RetryAfter: 20 * time.Millisecond})
	rec := &sleepRecorder{}
	c := clientConn(t, s, WithSleep(rec.sleep), WithJitter(0))
	st, err := c.ServerStream(testCtx(t), &testpb.EchoRequest{Message: "s"})
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for {
		m, err := st.Recv()
		if err != nil {
			if status.Code(err) != codes.OK && !strings.Contains(err.Error(), "EOF") {
				t.Fatalf("Recv: %v", err)
			}
			break
		}
		if m.GetMessage() != "s" {
			t.Fatalf("message %q", m.GetMessage())
		}
		n++
	}
	if n != 3 || s.admits.Load() != 2 {
		t.Errorf("received %d (want 3), server admits %d (want 2)", n, s.admits.Load())
	}
	if want := []time.Duration{20 * time.Millisecond}; !equalDurations(rec.got(), want) {
		t.Errorf("sleeps = %v, want %v", rec.got(), want)
	}
}

func TestRetryDelay(t *testing.T) {
	t.Parallel()
	withRI := func(code codes.Code, d *durationpb.Duration) error {
		st, err := status.New(code, "x").WithDetails(&errdetails.RetryInfo{RetryDelay: d})
		if err != nil {
			t.Fatal(err)
		}
		return st.Err()
	}
	re := status.Error(codes.ResourceExhausted, "x")
	for _, tc := range []struct {
		name string
		err  error
		md   metadata.MD
		d    time.Duration
		ok   bool
	}{
		{"pushback", re, metadata.Pairs(PushbackTrailer, "250"), 250 * time.Millisecond, true},
		{"pushback zero", re, metadata.Pairs(PushbackTrailer, "0"), 0, true},
		{"negative pushback", re, metadata.Pairs(PushbackTrailer, "-1"), 0, false},
		{"malformed pushback", re, metadata.Pairs(PushbackTrailer, "1.5"), 0, false},
		{"int32 overflow", re, metadata.Pairs(PushbackTrailer, "2147483648"), 0, false},
		{"pushback wins over RetryInfo", withRI(codes.Unavailable, durationpb.New(time.Second)), metadata.Pairs(PushbackTrailer, "-5"), 0, false},
		{"RetryInfo", withRI(codes.Unavailable, durationpb.New(time.Second)), nil, time.Second, true},
		{"invalid RetryInfo", withRI(codes.Unavailable, &durationpb.Duration{Seconds: 1, Nanos: -1}), nil, 0, false},
		{"negative RetryInfo", withRI(codes.Unavailable, durationpb.New(-time.Second)), nil, 0, false},
		{"no delay", re, nil, 0, false},
		{"other code", status.Error(codes.Internal, "x"), metadata.Pairs(PushbackTrailer, "5"), 0, false},
		{"not a status", errors.New("x"), metadata.Pairs(PushbackTrailer, "5"), 0, false},
	} {
		d, ok := RetryDelay(tc.err, tc.md)
		if d != tc.d || ok != tc.ok {
			t.Errorf("%s: RetryDelay = %v, %v; want %v, %v", tc.name, d, ok, tc.d, tc.ok)
		}
	}
}

func TestClientInvalidOptions(t *testing.T) {
	t.Parallel()
	if _, err := newClientConfig([]ClientOption{WithMaxAttempts(0), WithJitter(2), WithMaxDelay(0), nil}); err == nil ||
		!strings.Contains(err.Error(), "WithMaxAttempts(0)") || !strings.Contains(err.Error(), "WithJitter(2)") || !strings.Contains(err.Error(), "WithMaxDelay(0s)") {
		t.Errorf("err = %v", err)
	}
	// The shorthands panic at construction (TestMisconfigurationPanicsAtConstruction).
}
