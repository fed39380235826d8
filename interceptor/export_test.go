package interceptor

import (
	"context"
	"errors"
	"time"
)

// Test-only options of the client interceptors.

// WithSleep replaces how the client waits (default: the After of the
// client's clock, or a timer, cut short by ctx). sleep must return ctx's
// error if ctx ends first.
func WithSleep(sleep func(ctx context.Context, d time.Duration) error) ClientOption {
	return func(c *clientConfig) {
		if sleep == nil {
			c.errs = append(c.errs, errors.New("interceptor: WithSleep: nil func"))
			return
		}
		c.sleep = sleep
	}
}

// WithRand replaces the source of jitter, a func returning values in
// [0, 1).
func WithRand(f func() float64) ClientOption {
	return func(c *clientConfig) {
		if f == nil {
			c.errs = append(c.errs, errors.New("interceptor: WithRand: nil func"))
			return
		}
		c.rand = f
	}
}

// MustNew is New for the tests: it panics with New's error.
func MustNew(opts ...Option) *Interceptor {
	i, err := New(opts...)
	if err != nil {
		panic(err)
	}
	return i
}
