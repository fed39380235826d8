// Package exampletest runs an example program's run function in-process for
// tests: it captures the program's output, lets a test wait (bounded) for a
// line in it, and stops the program at the end of the test, failing the test
// if the program did not stop cleanly.
package exampletest

import (
	"bytes"
	"context"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
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

// PolicyWith writes a copy of the policy file at path into a temporary
// directory of t with rules inserted at the head of its rules: list and
// each replacement of old by new applied (pairs, in order), and returns
// the copy's path. It fails the test when the file has no rules: list or
// an old string is not in it.
func PolicyWith(t testing.TB, path, rules string, replace ...string) string {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	text := string(data)
	if !strings.Contains(text, "\nrules:\n") {
		t.Fatalf("%s has no rules: list", path)
	}
	text = strings.Replace(text, "\nrules:\n", "\nrules:\n"+rules, 1)
	for i := 0; i+1 < len(replace); i += 2 {
		if !strings.Contains(text, replace[i]) {
			t.Fatalf("%s does not contain %q", path, replace[i])
		}
		text = strings.Replace(text, replace[i], replace[i+1], 1)
	}
	out := filepath.Join(t.TempDir(), filepath.Base(path))
	if err := os.WriteFile(out, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	return out
}

// Decisions returns the value of the floodgate_decisions_total series in
// the Prometheus exposition text whose labels include every name=value
// pair of labels, summed over the series that match (0 when none does).
func Decisions(text string, labels ...string) float64 {
	var sum float64
	for _, line := range strings.Split(text, "\n") {
		rest, ok := strings.CutPrefix(line, "floodgate_decisions_total{")
		if !ok {
			continue
		}
		set, value, ok := strings.Cut(rest, "} ")
		if !ok {
			continue
		}
		match := true
		for i := 0; i+1 < len(labels); i += 2 {
			if !strings.Contains(","+set+",", ","+labels[i]+`="`+labels[i+1]+`",`) {
				match = false
				break
			}
		}
		if v, err := strconv.ParseFloat(strings.TrimSpace(value), 64); match && err == nil {
			sum += v
		}
	}
	return sum
}

// ExemptLoopback is a PolicyWith replacement pair that adds 127.0.0.1 to
// the example policy's exempt list, so that a test's load from one
// address meets the overload stages, not the per-IP rate limits.
var ExemptLoopback = []string{"exempt:                      # never limited: internal monitoring\n", "exempt:\n  - 127.0.0.1/32\n"}

// Adaptive are PolicyWith replacement pairs that make the example
// policy's overload stages adaptive, as its comments say: the shedder's
// capacity learnt between 8 and 256 (on latency alone, without a
// cpu_target: on a shared machine the container's CPU is busy with
// other work, and the CPU signal would rightly hold the capacity where it
// is), and an adaptive in-flight limit between 8 and 128 (Gradient2) that
// never refuses critical calls.
var Adaptive = []string{
	"\nshedder:\n  capacity: 64\n", "\nshedder:\n  adaptive: {min: 8, max: 256}\n",
	"\n  per_key:\n", "\n  adaptive: {min: 8, max: 128, bypass: critical}\n  per_key:\n",
}

// Gauge returns the value of the unlabelled-or-labelled series name in
// the Prometheus exposition text (the first one), and whether there is
// one.
func Gauge(text, name string) (float64, bool) {
	for _, line := range strings.Split(text, "\n") {
		rest, ok := strings.CutPrefix(line, name)
		if !ok || rest == "" || (rest[0] != ' ' && rest[0] != '{') {
			continue
		}
		if i := strings.LastIndexByte(rest, ' '); i >= 0 {
			if v, err := strconv.ParseFloat(rest[i+1:], 64); err == nil {
				return v, true
			}
		}
	}
	return 0, false
}
