package interceptor

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"strconv"
	"strings"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/floodgate-go/floodgate"
)

// ClientOption configures UnaryClient and StreamClient.
type ClientOption func(*clientConfig)

type clientConfig struct {
	errs     []error
	attempts int
	jitter   float64
	maxDelay time.Duration
	clock    floodgate.Clock
	sleep    func(ctx context.Context, d time.Duration) error
	rand     func() float64

	throttle  *Throttle  // WithThrottle; nil: off
	throttler *throttler // built from throttle by newClientConfig
}

// Client defaults.
const (
	// defaultMaxAttempts is the number of attempts (the first call
	// included) unless WithMaxAttempts says otherwise.
	defaultMaxAttempts = 3
	// defaultJitter is the fraction of the server's delay added at random.
	defaultJitter = 0.2
	// defaultMaxDelay is the longest pushback honoured; a server asking for
	// more gets its error returned at once.
	defaultMaxDelay = 30 * time.Second
)

// WithMaxAttempts bounds the attempts of one call, the first included
// (n >= 1; 1 disables retries). The default is 3.
func WithMaxAttempts(n int) ClientOption {
	return func(c *clientConfig) {
		if n < 1 {
			c.errs = append(c.errs, fmt.Errorf("interceptor: WithMaxAttempts(%d): want at least 1", n))
			return
		}
		c.attempts = n
	}
}

// WithJitter adds up to frac of the server's delay, at random, to each
// wait (0 <= frac <= 1), so throttled clients do not retry in step. The
// wait is never shorter than the server asked. The default is 0.2.
func WithJitter(frac float64) ClientOption {
	return func(c *clientConfig) {
		if !(frac >= 0 && frac <= 1) {
			c.errs = append(c.errs, fmt.Errorf("interceptor: WithJitter(%v): want 0 <= frac <= 1", frac))
			return
		}
		c.jitter = frac
	}
}

// WithMaxDelay sets the longest server delay the client waits for (> 0);
// a server asking for more gets its error returned at once. The default
// is 30s.
func WithMaxDelay(d time.Duration) ClientOption {
	return func(c *clientConfig) {
		if d <= 0 {
			c.errs = append(c.errs, fmt.Errorf("interceptor: WithMaxDelay(%v): want > 0", d))
			return
		}
		c.maxDelay = d
	}
}

// WithClientClock sets the clock the client reads: a wait is compared
// with the context deadline on it, and, when it has an After method (as
// package testing/clock's fake does), the client waits on it too; the
// default, floodgate.SystemClock(), waits on a timer.
func WithClientClock(clk floodgate.Clock) ClientOption {
	return func(c *clientConfig) {
		if clk == nil {
			c.errs = append(c.errs, errors.New("interceptor: WithClientClock: nil Clock"))
			return
		}
		c.clock = clk
	}
}

func newClientConfig(opts []ClientOption) (*clientConfig, error) {
	c := &clientConfig{
		attempts: defaultMaxAttempts, jitter: defaultJitter, maxDelay: defaultMaxDelay,
		clock: floodgate.SystemClock(), rand: rand.Float64,
	}
	for _, o := range opts {
		if o == nil {
			c.errs = append(c.errs, errors.New("interceptor: nil ClientOption"))
			continue
		}
		o(c)
	}
	if len(c.errs) > 0 {
		return nil, errors.Join(c.errs...)
	}
	if c.sleep == nil {
		c.sleep = sleepOn(c.clock)
	}
	if c.throttle != nil {
		c.throttler = newThrottler(*c.throttle, c.clock, c.rand)
	}
	return c, nil
}

func mustClientConfig(opts []ClientOption) *clientConfig {
	c, err := newClientConfig(opts)
	if err != nil {
		panic(err)
	}
	return c
}

// sleepOn returns how the client waits: on clock's After when it has one,
// else on a timer (sleepCtx). Either ends early, with ctx's error, when
// ctx ends.
func sleepOn(clock floodgate.Clock) func(ctx context.Context, d time.Duration) error {
	a, ok := clock.(interface {
		After(time.Duration) <-chan time.Time
	})
	if !ok {
		return sleepCtx
	}
	return func(ctx context.Context, d time.Duration) error {
		select {
		case <-a.After(d):
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// RetryDelay reports how long the server asked the client to wait before
// retrying a failed call: the grpc-retry-pushback-ms trailer when present
// (gRFC A6: a negative or malformed value means "do not retry"), else the
// google.rpc.RetryInfo detail of err. ok is false when err is not
// RESOURCE_EXHAUSTED or UNAVAILABLE, or the server gave no (valid) delay.
func RetryDelay(err error, trailer metadata.MD) (time.Duration, bool) {
	st, isStatus := status.FromError(err)
	if !isStatus || (st.Code() != codes.ResourceExhausted && st.Code() != codes.Unavailable) {
		return 0, false
	}
	if v := trailer.Get(PushbackTrailer); len(v) > 0 {
		ms, perr := strconv.ParseInt(strings.TrimSpace(v[0]), 10, 32)
		if perr != nil || ms < 0 {
			return 0, false
		}
		return time.Duration(ms) * time.Millisecond, true
	}
	for _, d := range st.Details() {
		if ri, ok := d.(*errdetails.RetryInfo); ok && ri.GetRetryDelay() != nil {
			if err := ri.GetRetryDelay().CheckValid(); err != nil {
				return 0, false
			}
			if delay := ri.GetRetryDelay().AsDuration(); delay >= 0 {
				return delay, true
			}
			return 0, false
		}
	}
	return 0, false
}

// wait decides whether to retry after err and waits; it returns false when
// the call must end with err.
func (c *clientConfig) wait(ctx context.Context, attempt int, err error, trailer metadata.MD) bool {
	if attempt >= c.attempts {
		return false
	}
	delay, ok := RetryDelay(err, trailer)
	if !ok || delay > c.maxDelay {
		return false
	}
	if c.jitter > 0 {
		delay += time.Duration(float64(delay) * c.jitter * c.rand())
	}
	if dl, has := ctx.Deadline(); has && !c.clock.Now().Add(delay).Before(dl) {
		return false // the retry could not finish before the deadline
	}
	return c.sleep(ctx, delay) == nil
}

// UnaryClient returns a gRPC unary client interceptor that retries calls
// denied with RESOURCE_EXHAUSTED or UNAVAILABLE when the server said when
// (grpc-retry-pushback-ms, else RetryInfo), waiting at least that long plus
// jitter, for at most WithMaxAttempts attempts, and never past the
// context's deadline. Errors without a server delay are returned at once:
// RESOURCE_EXHAUSTED also means "message too large", which no wait cures.
// With WithThrottle (off by default) it also throttles itself while the
// server rejects most calls; see Throttle.
//
// It panics at construction if an option is invalid, naming it.
func UnaryClient(opts ...ClientOption) grpc.UnaryClientInterceptor {
	c := mustClientConfig(opts)
	return func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		var trailer metadata.MD
		callOpts := append(opts[:len(opts):len(opts)], grpc.Trailer(&trailer))
		call := func() error { return invoker(ctx, method, req, reply, cc, callOpts...) }
		for attempt := 1; ; attempt++ {
			trailer = nil
			err := c.attempt(call)
			if err == nil || IsClientThrottled(err) || !c.wait(ctx, attempt, err, trailer) {
				return err
			}
		}
	}
}

// StreamClient returns a gRPC stream client interceptor with UnaryClient's
// retry rules for server-streaming calls (one request, a stream of
// responses): when the first RecvMsg fails with a server delay, the stream
// is reopened and the request re-sent. Client- and bidi-streaming calls are
// not retried (under WithThrottle they are throttled: see throttledStream).
// Replaying them from an interceptor is not safe: a denied stream's SendMsg returns io.EOF, the caller stops
// sending, and a retry would then carry only the messages sent so far. For
// those streams use grpc-go's own retry policy (a service config listing
// RESOURCE_EXHAUSTED and UNAVAILABLE), which retries inside SendMsg,
// buffers what was sent and honours the grpc-retry-pushback-ms trailer;
// or use RetryDelay on their errors.
//
// It panics at construction if an option is invalid, naming it.
func StreamClient(opts ...ClientOption) grpc.StreamClientInterceptor {
	c := mustClientConfig(opts)
	return func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
		if desc.ClientStreams {
			if c.throttler == nil {
				return streamer(ctx, desc, cc, method, opts...)
			}
			cs, err := c.open(ctx, desc, cc, method, streamer, opts)
			if err != nil {
				return nil, err
			}
			return &throttledStream{ClientStream: cs, t: c.throttler}, nil
		}
		cs, err := c.open(ctx, desc, cc, method, streamer, opts)
		if err != nil {
			return nil, err
		}
		return &retryStream{ClientStream: cs, c: c, ctx: ctx, desc: desc, cc: cc, method: method, streamer: streamer, opts: opts, pending: c.throttler != nil}, nil
	}
}

// open opens a server-streaming call under the throttle, if any: the
// attempt's outcome is recorded at its first RecvMsg (retryStream), or
// here when the stream cannot be opened.
func (c *clientConfig) open(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts []grpc.CallOption) (grpc.ClientStream, error) {
	if c.throttler != nil && !c.throttler.admit() {
		return nil, throttledError(DefaultDomain)
	}
	cs, err := streamer(ctx, desc, cc, method, opts...)
	if err != nil && c.throttler != nil {
		c.throttler.done(err)
	}
	return cs, err
}

// retryStream replays a server-streaming call's single request when the
// first response is a denial with a server delay.
type retryStream struct {
	grpc.ClientStream
	c        *clientConfig
	ctx      context.Context
	desc     *grpc.StreamDesc
	cc       *grpc.ClientConn
	method   string
	streamer grpc.Streamer
	opts     []grpc.CallOption

	req      any
	closed   bool
	received bool
	attempt  int
	pending  bool // the throttle awaits this attempt's first answer
}

func (s *retryStream) SendMsg(m any) error {
	s.req = m
	return s.ClientStream.SendMsg(m)
}

func (s *retryStream) CloseSend() error {
	s.closed = true
	return s.ClientStream.CloseSend()
}

func (s *retryStream) RecvMsg(m any) error {
	if s.attempt == 0 {
		s.attempt = 1
	}
	for {
		err := s.ClientStream.RecvMsg(m)
		if s.pending {
			s.pending = false
			s.c.throttler.done(err)
		}
		if err == nil {
			s.received = true
			return nil
		}
		if s.received || s.req == nil || !s.closed || !s.c.wait(s.ctx, s.attempt, err, s.ClientStream.Trailer()) {
			return err
		}
		s.attempt++
		cs, serr := s.c.open(s.ctx, s.desc, s.cc, s.method, s.streamer, s.opts)
		if serr != nil {
			return serr
		}
		s.pending = s.c.throttler != nil
		if serr := cs.SendMsg(s.req); serr != nil && !errors.Is(serr, errEOF) {
			s.ClientStream = cs
			return serr
		}
		if serr := cs.CloseSend(); serr != nil {
			s.ClientStream = cs
			return serr
		}
		s.ClientStream = cs
	}
}

// throttledStream is a client- or bidi-streaming call under the throttle:
// its first RecvMsg's outcome (a message, the end of the stream, or the
// status the server refused it with) is the attempt's outcome, as the
// first answer is for a server-streaming call.
type throttledStream struct {
	grpc.ClientStream
	t        *throttler
	answered bool
}

func (s *throttledStream) RecvMsg(m any) error {
	err := s.ClientStream.RecvMsg(m)
	if !s.answered {
		s.answered = true
		s.t.done(err)
	}
	return err
}

// errEOF is io.EOF: SendMsg returns it when the stream already ended, and
// the real status then comes from RecvMsg.
var errEOF = io.EOF
