package interceptor

import (
	"context"
	"io"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/internal/testpb"
	"github.com/floodgate-go/floodgate/testing/clock"
)

// capacityStage is a server stage that accepts what a token bucket on the
// test's fake clock allows (rate per second, burst 10) and sheds the rest,
// as an overloaded floodgate server does (UNAVAILABLE with a pushback).
type capacityStage struct {
	clk  *clock.Fake
	rate float64

	mu       sync.Mutex
	tokens   float64
	last     time.Time
	attempts int
	accepts  int
}

func (c *capacityStage) Admit(_ context.Context, r *floodgate.Request) (floodgate.Decision, floodgate.Done, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	now := c.clk.Now()
	if !c.last.IsZero() {
		c.tokens = min(10, c.tokens+now.Sub(c.last).Seconds()*c.rate)
	}
	c.last = now
	c.attempts++
	if c.tokens < 1 {
		return floodgate.Decision{Stage: floodgate.StageShedder, RetryAfter: time.Second}, nil, nil
	}
	c.tokens--
	c.accepts++
	return floodgate.Decision{Allowed: true, Stage: floodgate.StageShedder}, nil, nil
}

func (c *capacityStage) counts() (attempts, accepts int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.attempts, c.accepts
}

// drive makes n calls one after the other, 1ms of fake time apart (1000
// calls a second of demand), through the unary client interceptor built
// with copts, against the server interceptor of a stage that accepts rate
// calls a second. The client interceptor's invoker hands each attempt to
// the server interceptor in process: the wire adds nothing to the
// throttle's arithmetic (TestClientThrottledCallEndsTheCall and
// TestClientThrottleBidiStream throttle calls over gRPC), and without it
// thousands of calls take milliseconds. It returns the attempts that
// reached the server and their accepts over the last n/2 calls, and how
// many calls the client throttled itself.
func drive(t *testing.T, n int, rate float64, copts ...ClientOption) (attempts, accepts, throttled int) {
	t.Helper()
	clk := clock.New(time.Time{})
	srv := &capacityStage{clk: clk, rate: rate}
	client := UnaryClient(append([]ClientOption{WithClientClock(clk), WithMaxAttempts(1), WithRand(rand.New(rand.NewPCG(7, 9)).Float64)}, copts...)...)
	server := mustUnary(srv)
	info := &grpc.UnaryServerInfo{FullMethod: testpb.Echo_Plain_FullMethodName}
	handler := func(_ context.Context, req any) (any, error) {
		return &testpb.EchoResponse{Message: req.(*testpb.EchoRequest).GetMessage()}, nil
	}
	invoker := func(ctx context.Context, _ string, req, reply any, _ *grpc.ClientConn, _ ...grpc.CallOption) error {
		resp, err := server(ctx, req, info, handler)
		if err == nil {
			reply.(*testpb.EchoResponse).Message = resp.(*testpb.EchoResponse).GetMessage()
		}
		return err
	}
	ctx := testCtx(t)
	var a0, acc0 int
	for i := range n {
		if i == n/2 {
			a0, acc0 = srv.counts()
		}
		clk.Advance(time.Millisecond)
		err := client(ctx, info.FullMethod, &testpb.EchoRequest{}, &testpb.EchoResponse{}, nil, invoker)
		switch {
		case err == nil:
		case IsClientThrottled(err):
			if i >= n/2 {
				throttled++
			}
		case status.Code(err) != codes.Unavailable:
			t.Fatalf("call %d: %v", i, err)
		}
	}
	a1, acc1 := srv.counts()
	return a1 - a0, acc1 - acc0, throttled
}

// Against a server that can take half of what the client wants (it sheds
// 50% without throttling), the attempts that reach it fall to K times its
// accepts: with K = 1.5, 75% of the calls are sent and 2 in 3 of those are
// accepted. With the default K = 2 the client sends every call (2 x 50% is
// all of them), and against a server that takes a quarter it sends half.
// Throttling is off by default: every call is sent. Counted over the last
// 3 000 of 6 000 calls (6s of demand at 1 000 a second, the throttle's
// window 5s), on fake time with a seeded random source, each call through
// the client and server interceptors in process (drive).
func TestClientThrottleFallsToKTimesAccepts(t *testing.T) {
	t.Parallel()
	const n = 6_000
	for _, tc := range []struct {
		name      string
		rate      float64 // the server's accepts per second, of 1000 wanted
		opts      []ClientOption
		wantRatio float64 // attempts / accepts
		wantSent  float64 // attempts / calls
	}{
		{"off by default, server sheds 50%", 500, nil, 2, 1},
		{"K 1.5, server sheds 50%", 500, []ClientOption{WithThrottle(Throttle{K: 1.5, Window: 5 * time.Second})}, 1.5, 0.75},
		{"K 2, server sheds 50%", 500, []ClientOption{WithThrottle(Throttle{Window: 5 * time.Second})}, 2, 1},
		{"K 2, server sheds 75%", 250, []ClientOption{WithThrottle(Throttle{Window: 5 * time.Second})}, 2, 0.5},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			attempts, accepts, throttled := drive(t, n, tc.rate, tc.opts...)
			ratio, sent := float64(attempts)/float64(accepts), float64(attempts)/(n/2)
			t.Logf("attempts %d, accepts %d (ratio %.3f), throttled %d, sent %.3f of the calls", attempts, accepts, ratio, throttled, sent)
			if ratio < tc.wantRatio*0.93 || ratio > tc.wantRatio*1.07 {
				t.Errorf("attempts/accepts %.3f, want %.2f within 7%%", ratio, tc.wantRatio)
			}
			if sent < tc.wantSent-0.05 || sent > tc.wantSent+0.05 {
				t.Errorf("sent %.3f of the calls, want %.2f +- 0.05", sent, tc.wantSent)
			}
			if attempts+throttled != n/2 {
				t.Errorf("attempts %d + throttled %d != %d calls: every call is either sent or throttled", attempts, throttled, n/2)
			}
			if tc.opts == nil && throttled != 0 {
				t.Errorf("throttled %d calls with throttling off", throttled)
			}
		})
	}
}

// A throttled call is never sent, ends the call (no retry, whatever the
// pushback of the previous attempt) and says why.
func TestClientThrottledCallEndsTheCall(t *testing.T) {
	t.Parallel()
	clk := clock.New(time.Time{})
	srv := &capacityStage{clk: clk, rate: 0} // rejects everything once its burst is spent
	rec := &sleepRecorder{}
	c := testpb.NewEchoClient(startBufconn(t, &echoServer{},
		[]grpc.ServerOption{grpc.ChainUnaryInterceptor(mustUnary(srv))},
		grpc.WithChainUnaryInterceptor(UnaryClient(WithClientClock(clk), WithSleep(func(ctx context.Context, d time.Duration) error {
			clk.Advance(d)
			return rec.sleep(ctx, d)
		}), WithMaxAttempts(5), WithThrottle(Throttle{K: 1}), WithRand(func() float64 { return 0.5 }))),
		grpc.WithDisableRetry()))
	ctx := testCtx(t)
	var last error
	for range 40 {
		_, last = c.Plain(ctx, &testpb.EchoRequest{})
		if IsClientThrottled(last) {
			break
		}
	}
	if !IsClientThrottled(last) || status.Code(last) != codes.Unavailable || !strings.Contains(last.Error(), "the client throttles itself") {
		t.Fatalf("last error %v, want a client throttle", last)
	}
	attempts, _ := srv.counts()
	before := attempts
	_, err := c.Plain(ctx, &testpb.EchoRequest{})
	if attempts, _ = srv.counts(); !IsClientThrottled(err) || attempts != before {
		t.Fatalf("next call: %v, server attempts %d -> %d; want throttled, nothing sent", err, before, attempts)
	}
}

func TestThrottleOptionErrors(t *testing.T) {
	t.Parallel()
	_, err := newClientConfig([]ClientOption{WithThrottle(Throttle{K: 0.5, Window: -time.Second})})
	for _, want := range []string{"WithThrottle: K 0.5 must be a finite number >= 1", "WithThrottle: Window -1s is negative"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("error %v; want it to mention %q", err, want)
		}
	}
}

// The probability is the SRE book's formula: with 100 requests and 20
// accepts in the window and K 2, (100 - 40) / 101.
func TestThrottleProbability(t *testing.T) {
	t.Parallel()
	clk := clock.New(time.Time{})
	var draws []float64
	r := 0.0
	th := newThrottler(Throttle{K: 2, Window: time.Minute, Rejected: overloaded}, clk, func() float64 { draws = append(draws, r); return r })
	for i := range 100 {
		if i < 20 {
			th.done(nil)
		} else {
			th.done(status.Error(codes.Unavailable, "shed"))
		}
	}
	p := (100.0 - 2*20) / 101
	r = p
	if !th.admit() {
		t.Fatalf("a draw at p = %v was throttled", p)
	}
	// An admitted call is counted when it ends, not here.
	r = p - 1e-9
	if th.admit() {
		t.Fatalf("a draw just below p = %v was admitted", p)
	}
	// The throttled call counted as a request: p is now (101 - 40) / 102.
	r = (101.0-40)/102 - 1e-9
	if th.admit() {
		t.Fatal("the throttled call was not counted as a request")
	}
	// A window later everything is forgotten: no throttling.
	clk.Advance(time.Minute)
	r = 0
	if !th.admit() || len(draws) != 3 {
		t.Fatalf("after a window: throttled, or drew %d times (want 3: an empty window draws nothing)", len(draws))
	}
}

// Server-streaming calls are throttled too: the first answer of each
// stream is its outcome, and once the server has rejected enough of them
// a new stream is refused before it is opened.
func TestClientThrottleServerStream(t *testing.T) {
	t.Parallel()
	clk := clock.New(time.Time{})
	srv := &capacityStage{clk: clk, rate: 0}
	cc := startBufconn(t, &echoServer{},
		[]grpc.ServerOption{grpc.ChainStreamInterceptor(mustStream(srv))},
		grpc.WithChainStreamInterceptor(StreamClient(WithClientClock(clk), WithMaxAttempts(1), WithThrottle(Throttle{K: 1}), WithRand(func() float64 { return 0.5 }))),
		grpc.WithDisableRetry())
	c := testpb.NewEchoClient(cc)
	ctx := testCtx(t)
	var openErr error
	for i := 0; i < 40 && openErr == nil; i++ {
		var st grpc.ServerStreamingClient[testpb.EchoResponse]
		st, openErr = c.ServerStream(ctx, &testpb.EchoRequest{})
		if openErr != nil {
			break
		}
		if _, err := st.Recv(); err == nil && i >= 10 {
			t.Fatalf("stream %d answered past the burst", i)
		}
	}
	if !IsClientThrottled(openErr) {
		t.Fatalf("open error %v, want a client throttle", openErr)
	}
	attempts, _ := srv.counts()
	if _, err := c.ServerStream(ctx, &testpb.EchoRequest{}); !IsClientThrottled(err) {
		t.Fatalf("next stream: %v", err)
	}
	if a, _ := srv.counts(); a != attempts {
		t.Fatalf("a throttled stream reached the server (%d -> %d attempts)", attempts, a)
	}
}

// Client- and bidi-streaming calls are throttled like unary ones: each
// stream is one request, opened or refused by the throttle, and its first
// answer (a message, the end of the stream, or the status the server
// refused it with) is its outcome; a throttled stream never opens. Over
// gRPC, against a server that takes half of what the client wants, with
// K = 1.5 and a window of 500ms: each of 1 000 streams, 1ms of fake time
// apart, is throttled exactly when a throttle of the test's own, fed the
// same outcomes and the same seeded draws, says so (so the streams obey
// the arithmetic TestClientThrottleFallsToKTimesAccepts checks over 6 000
// calls), and the streams that reach the server over the last 500 fall to
// 1.5 times its accepts, within 7%.
func TestClientThrottleBidiStream(t *testing.T) {
	t.Parallel()
	const (
		n      = 1_000
		window = 500 * time.Millisecond
	)
	clk := clock.New(time.Time{})
	srv := &capacityStage{clk: clk, rate: 500}
	cfg := Throttle{K: 1.5, Window: window}
	cc := startBufconn(t, &echoServer{},
		[]grpc.ServerOption{grpc.ChainStreamInterceptor(mustStream(srv))},
		grpc.WithChainStreamInterceptor(StreamClient(WithClientClock(clk), WithMaxAttempts(1),
			WithThrottle(cfg), WithRand(rand.New(rand.NewPCG(7, 9)).Float64))),
		grpc.WithDisableRetry())
	cfg.Rejected = overloaded
	model := newThrottler(cfg, clk, rand.New(rand.NewPCG(7, 9)).Float64)
	c := testpb.NewEchoClient(cc)
	ctx := testCtx(t)
	var a0, acc0, throttled int
	for i := range n {
		if i == n/2 {
			a0, acc0 = srv.counts()
		}
		clk.Advance(time.Millisecond)
		send := model.admit()
		st, err := c.Bidi(ctx)
		if IsClientThrottled(err) {
			if send {
				t.Fatalf("stream %d throttled; the throttle's arithmetic sends it", i)
			}
			if i >= n/2 {
				throttled++
			}
			continue
		}
		if err != nil {
			t.Fatalf("stream %d: open: %v", i, err)
		}
		if !send {
			t.Fatalf("stream %d opened; the throttle's arithmetic throttles it", i)
		}
		if err := st.Send(&testpb.EchoRequest{Message: "x"}); err != nil && err != io.EOF {
			t.Fatalf("stream %d: send: %v", i, err)
		}
		if err := st.CloseSend(); err != nil {
			t.Fatalf("stream %d: close: %v", i, err)
		}
		_, first := st.Recv()
		if first != nil && status.Code(first) != codes.Unavailable {
			t.Fatalf("stream %d: %v", i, first)
		}
		model.done(first)
		for first == nil { // drain to the end of the stream
			_, first = st.Recv()
		}
	}
	a1, acc1 := srv.counts()
	attempts, accepts := a1-a0, acc1-acc0
	ratio := float64(attempts) / float64(accepts)
	if ratio < 1.5*0.93 || ratio > 1.5*1.07 {
		t.Errorf("attempts %d, accepts %d: attempts/accepts %.3f, want 1.5 within 7%%", attempts, accepts, ratio)
	}
	if attempts+throttled != n/2 {
		t.Errorf("attempts %d + throttled %d != %d streams: every stream is either sent or throttled", attempts, throttled, n/2)
	}
}
