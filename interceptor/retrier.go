package interceptor

import (
	"context"

	"google.golang.org/grpc/metadata"

	"github.com/floodgate-go/floodgate/internal/seam"
)

// retrier is the seam.Retrier of a client of another transport
// (connectmw's Connect client interceptor): UnaryClient's rules, retries
// the server asked for and WithThrottle, with UnaryClient's options.
type retrier struct{ c *clientConfig }

// newRetrier returns a retrier with UnaryClient's options. The error
// names every invalid option.
func newRetrier(opts ...ClientOption) (seam.Retrier, error) {
	c, err := newClientConfig(opts)
	if err != nil {
		return nil, err
	}
	return &retrier{c: c}, nil
}

// Do implements seam.Retrier.
func (r *retrier) Do(ctx context.Context, attempt func() (metadata.MD, error)) error {
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

// Open implements seam.Retrier.
func (r *retrier) Open() error {
	if r.c.throttler != nil && !r.c.throttler.admit() {
		return throttledError(DefaultDomain)
	}
	return nil
}

// Answered implements seam.Retrier.
func (r *retrier) Answered(err error) {
	if r.c.throttler != nil {
		r.c.throttler.done(err)
	}
}

// Wait implements seam.Retrier.
func (r *retrier) Wait(ctx context.Context, n int, err error, trailer metadata.MD) bool {
	return r.c.wait(ctx, n, err, trailer)
}
