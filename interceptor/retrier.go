package interceptor

import (
	"context"

	"google.golang.org/grpc/metadata"
)

// Retrier applies UnaryClient's rules (retries the server asked for, and
// WithThrottle) to the calls of a client of another transport: connectmw's
// Connect client interceptor is built on it. It is safe for concurrent
// use; its throttle, if any, is shared by every call made through it.
//
// Do serves a call whose attempt runs within one function call. A
// stream's attempt does not: it is let through or refused when the stream
// opens (before the caller's first Send, which a refused stream fails),
// and answered at the caller's first Receive, in calls that return to the
// caller in between; so a stream asks the throttle with Open and
// Answered, and decides a retry with Wait, as StreamClient does.
type Retrier struct{ c *clientConfig }

// NewRetrier returns a Retrier with UnaryClient's options. The error names
// every invalid option.
func NewRetrier(opts ...ClientOption) (*Retrier, error) {
	c, err := newClientConfig(opts)
	if err != nil {
		return nil, err
	}
	return &Retrier{c: c}, nil
}

// Do runs attempt, one attempt of a call, and runs it again while
// UnaryClient would retry: the error is RESOURCE_EXHAUSTED or UNAVAILABLE
// and the server said when (the PushbackTrailer in the trailer attempt
// returns, else RetryInfo), waiting that long plus jitter, for at most
// WithMaxAttempts attempts and never past ctx's deadline. attempt's error
// must carry its gRPC status (a status error, or one with a GRPCStatus
// method) for the retry rules and the throttle to read it. Do returns the
// last attempt's error, or the throttle's error (IsClientThrottled) for
// an attempt the throttle did not send.
func (r *Retrier) Do(ctx context.Context, attempt func() (metadata.MD, error)) error {
	for n := 1; ; n++ {
		var trailer metadata.MD
		err := r.c.attempt(func() error {
			var err error
			trailer, err = attempt()
			return err
		})
		if err == nil || IsClientThrottled(err) || !r.c.wait(ctx, n, err, trailer) {
			return err
		}
	}
}

// Open asks the throttle (WithThrottle) whether to send one attempt of a
// stream: nil to send it, then Answered with its first answer; or the
// throttle's error (IsClientThrottled) for an attempt not to send. Without
// a throttle it always returns nil.
func (r *Retrier) Open() error {
	if r.c.throttler != nil && !r.c.throttler.admit() {
		return throttledError(DefaultDomain)
	}
	return nil
}

// Answered tells the throttle how an attempt Open let through was first
// answered (its first message, nil; or the error it ended with), as
// StreamClient does; without a throttle it does nothing.
func (r *Retrier) Answered(err error) {
	if r.c.throttler != nil {
		r.c.throttler.done(err)
	}
}

// Wait decides, as Do does, whether attempt n (1 for the first) of a call
// that failed with err and trailer is retried, and waits the server's
// delay plus jitter: false means the call ends with err. err must carry
// its gRPC status, as in Do.
func (r *Retrier) Wait(ctx context.Context, n int, err error, trailer metadata.MD) bool {
	return r.c.wait(ctx, n, err, trailer)
}
