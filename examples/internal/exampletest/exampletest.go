// Package exampletest runs an example program's run function in-process for
// tests: it captures the program's output, lets a test wait (bounded) for a
// line in it, and stops the program at the end of the test, failing the test
// if the program did not stop cleanly.
package exampletest

import (
	"bytes"
	"context"
	"io"
	"regexp"
	"sync"
	"testing"
	"time"
)

// Output is an io.Writer safe for concurrent use that keeps everything
// written to it.
type Output struct {
	mu      sync.Mutex
	buf     bytes.Buffer
	changed chan struct{} // closed and replaced on every write
	exited  chan struct{} // closed when the program's run returned (Start)
	err     error         // what run returned, once exited is closed
}

// NewOutput returns an empty Output.
func NewOutput() *Output {
	return &Output{changed: make(chan struct{}), exited: make(chan struct{})}
}

// Write implements io.Writer.
func (o *Output) Write(p []byte) (int, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	n, err := o.buf.Write(p)
	close(o.changed)
	o.changed = make(chan struct{})
	return n, err
}

// String returns everything written so far.
func (o *Output) String() string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.buf.String()
}

// WaitFor waits up to timeout until the output matches re at least n times,
// and returns the submatches of the n-th match. It fails the test on timeout.
func (o *Output) WaitFor(t testing.TB, re *regexp.Regexp, n int, timeout time.Duration) []string {
	t.Helper()
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	for {
		o.mu.Lock()
		matches := re.FindAllStringSubmatch(o.buf.String(), -1)
		changed := o.changed
		o.mu.Unlock()
		if len(matches) >= n {
			return matches[n-1]
		}
		select {
		case <-changed:
		case <-o.exited:
			if len(re.FindAllString(o.String(), -1)) < n {
				t.Fatalf("program exited (%v) before the %d-th match of %q; output:\n%s", o.err, n, re, o.String())
			}
		case <-deadline.C:
			t.Fatalf("no %d-th match of %q within %s; output so far:\n%s", n, re, timeout, o.String())
			return nil
		}
	}
}

// Start runs run(ctx, args, output) in a goroutine until the test ends; then
// it cancels ctx and fails the test if run does not return nil within 10 s.
func Start(t testing.TB, run func(ctx context.Context, args []string, stdout io.Writer) error, args ...string) *Output {
	t.Helper()
	out := NewOutput()
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		out.err = run(ctx, args, out)
		close(out.exited)
	}()
	t.Cleanup(func() {
		cancel()
		select {
		case <-out.exited:
			if out.err != nil {
				t.Errorf("run returned %v; output:\n%s", out.err, out.String())
			}
		case <-time.After(10 * time.Second):
			t.Errorf("run did not return within 10s of cancellation; output:\n%s", out.String())
		}
	})
	return out
}
