package interceptor

import (
	"errors"
	"fmt"
	"math"
	"sync"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/floodgate-go/floodgate"
)

// throttleBuckets is how many buckets a Throttle's window slides by.
const throttleBuckets = 30

// Throttle configures client-side adaptive throttling (WithThrottle), as
// the Google SRE book describes it: the client counts, over the last
// Window, the calls it wanted to make (requests) and the calls the server
// accepted (accepts), and rejects a new call locally, without sending it,
// with probability
//
//	max(0, (requests - K*accepts) / (requests + 1))
//
// so that when the server rejects most calls, the client stops sending
// most of them, and a shedding server is not hammered by retries; when the
// server recovers, accepts rise and so does what the client sends. A call
// rejected locally counts as a request and not as an accept. The zero
// value of every field is its default.
type Throttle struct {
	// K is how many requests per accept the client may send before it
	// throttles itself; 0 means DefaultThrottleK (2). Lower is more
	// aggressive; it must be >= 1.
	K float64
	// Window is how long requests and accepts are remembered (a sliding
	// window in 30 steps); 0 means DefaultThrottleWindow (30s). It must
	// not be negative.
	Window time.Duration
	// Rejected reports whether a call's error is the server rejecting it
	// for overload or quota. nil means RESOURCE_EXHAUSTED or UNAVAILABLE
	// (what floodgate servers answer a denied call with); every other
	// outcome, success or error, is an accept: the server did the work.
	Rejected func(error) bool
}

// WithThrottle turns on client-side adaptive throttling for every call of
// the interceptor (off by default): see Throttle. It applies to each
// attempt, retries included, so a throttled retry ends the call. One
// throttle is shared by every call of the interceptor: build one
// interceptor per backend (grpc.WithChainUnaryInterceptor on its
// ClientConn). Every call is throttled, streams included: a stream is
// one request, opened or refused by the throttle, and its first answer
// (its first message, its end, or the status it was refused with) is the
// outcome; a stream refused by the throttle fails to open.
func WithThrottle(t Throttle) ClientOption {
	return func(c *clientConfig) {
		if t.K == 0 {
			t.K = DefaultThrottleK
		}
		if t.Window == 0 {
			t.Window = DefaultThrottleWindow
		}
		if !(t.K >= 1) || math.IsInf(t.K, 0) {
			c.errs = append(c.errs, fmt.Errorf("interceptor: WithThrottle: K %v must be a finite number >= 1", t.K))
		}
		if t.Window < 0 {
			c.errs = append(c.errs, fmt.Errorf("interceptor: WithThrottle: Window %s is negative", t.Window))
		}
		if t.Rejected == nil {
			t.Rejected = overloaded
		}
		c.throttle = &t
	}
}

// overloaded is Throttle.Rejected's default.
func overloaded(err error) bool {
	switch status.Code(err) {
	case codes.ResourceExhausted, codes.Unavailable:
		return true
	}
	return false
}

// throttler is the state of one interceptor's Throttle.
type throttler struct {
	cfg   Throttle
	clock floodgate.Clock
	rand  func() float64
	step  time.Duration

	mu      sync.Mutex
	buckets [throttleBuckets]throttleBucket
}

type throttleBucket struct {
	start             int64 // the step this bucket counts (Unix nanos / step)
	requests, accepts float64
}

func newThrottler(cfg Throttle, clock floodgate.Clock, rand func() float64) *throttler {
	return &throttler{cfg: cfg, clock: clock, rand: rand, step: max(cfg.Window/throttleBuckets, time.Nanosecond)}
}

// bucket returns the bucket of now, reset if it held an older step, and
// the sums over the window; mu held.
func (t *throttler) bucket(now time.Time) (b *throttleBucket, requests, accepts float64) {
	cur := now.UnixNano() / int64(t.step)
	b = &t.buckets[cur%throttleBuckets]
	if b.start != cur {
		*b = throttleBucket{start: cur}
	}
	for i := range t.buckets {
		if o := &t.buckets[i]; cur-o.start < throttleBuckets {
			requests += o.requests
			accepts += o.accepts
		}
	}
	return b, requests, accepts
}

// admit decides whether to send one attempt; a throttled one is counted
// as a request at once.
func (t *throttler) admit() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	b, requests, accepts := t.bucket(t.clock.Now())
	p := (requests - t.cfg.K*accepts) / (requests + 1)
	if p <= 0 || t.rand() >= p {
		return true
	}
	b.requests++
	return false
}

// done records how a sent attempt ended: when it ends, so attempts in
// flight never count as requests without their answer.
func (t *throttler) done(err error) {
	accepted := err == nil || !t.cfg.Rejected(err)
	t.mu.Lock()
	defer t.mu.Unlock()
	b, _, _ := t.bucket(t.clock.Now())
	b.requests++
	if accepted {
		b.accepts++
	}
}

// throttledError is the error of a call the client throttled: UNAVAILABLE
// (retryable later; nothing was sent) with ErrorInfo reason
// ReasonClientThrottled.
func throttledError(domain string) error {
	st := status.New(codes.Unavailable, "floodgate: call not sent: the client throttles itself while the server rejects most calls")
	if d, err := st.WithDetails(&errdetails.ErrorInfo{Reason: ReasonClientThrottled, Domain: domain}); err == nil {
		st = d
	}
	return st.Err()
}

// IsClientThrottled reports whether err is a call a client interceptor
// did not send: one with WithThrottle, or an outbound stage's refusal
// (RoundTripper, UnaryOutbound, StreamOutbound; through the *url.Error of
// an http.Client too).
func IsClientThrottled(err error) bool {
	if _, ok := errors.AsType[*outboundError](err); ok {
		return true
	}
	st, ok := status.FromError(err)
	if !ok || st.Code() != codes.Unavailable {
		return false
	}
	for _, d := range st.Details() {
		if ei, ok := d.(*errdetails.ErrorInfo); ok && ei.GetReason() == ReasonClientThrottled {
			return true
		}
	}
	return false
}

// attempt runs one attempt of a call under the throttle, if any.
func (c *clientConfig) attempt(call func() error) error {
	if c.throttler == nil {
		return call()
	}
	if !c.throttler.admit() {
		return throttledError(DefaultDomain)
	}
	err := call()
	c.throttler.done(err)
	return err
}
