package otel

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/floodgate-go/floodgate/internal/lateanswer"
	"github.com/floodgate-go/floodgate/quota"
)

// takeOnly is a store with no capability beyond Take.
type takeOnly struct{}

func (takeOnly) Take(context.Context, []quota.Bucket, []quota.Result) (bool, error) { return true, nil }

// closing is a store that records Close and says it decides store errors.
type closing struct {
	takeOnly
	closed *bool
}

func (c closing) Close() error                                               { *c.closed = true; return errors.New("closed") }
func (closing) DecidesOnStoreError() bool                                    { return true }
func (closing) Unwrap() quota.Store                                          { return nil }
func (closing) Settle(context.Context, []quota.Bucket, []quota.Result) error { return nil }

// TestStoreForwardsCapabilities: the instrumented store names what it
// wraps (Unwrap), reports only the capabilities the wrapped store has,
// and a method the wrapped store lacks returns an error naming it instead
// of doing nothing.
func TestStoreForwardsCapabilities(t *testing.T) {
	o, err := New()
	if err != nil {
		t.Fatal(err)
	}
	bare := o.Store(takeOnly{})
	if u := bare.(interface{ Unwrap() quota.Store }).Unwrap(); u != (takeOnly{}) {
		t.Fatalf("Unwrap = %v, want the wrapped store", u)
	}
	if quota.Settles(bare) {
		t.Error("quota.Settles(otel over a store that cannot settle) = true")
	}
	if bare.(interface{ DecidesOnStoreError() bool }).DecidesOnStoreError() {
		t.Error("DecidesOnStoreError over a plain store = true")
	}
	ctx := context.Background()
	for name, call := range map[string]func() error{
		"Settle":  func() error { return bare.(quota.Settler).Settle(ctx, nil, nil) },
		"Report":  func() error { return bare.(quota.Reporter).Report(ctx, 1, 1, nil, nil) },
		"Resolve": func() error { return bare.(quota.Reporter).Resolve(ctx, 1, 1, nil, nil) },
	} {
		if err := call(); err == nil || !strings.Contains(err.Error(), "otel.takeOnly") || !strings.Contains(err.Error(), name) {
			t.Errorf("%s over a store without it: %v, want an error naming the method and the store", name, err)
		}
	}
	if err := bare.(interface{ Close() error }).Close(); err != nil {
		t.Errorf("Close over a store without one: %v, want nil", err)
	}

	var closed bool
	full := o.Store(closing{closed: &closed})
	if !quota.Settles(full) || !full.(interface{ DecidesOnStoreError() bool }).DecidesOnStoreError() {
		t.Error("a settling store that decides store errors lost either capability when instrumented")
	}
	if err := full.(interface{ Close() error }).Close(); err == nil || !closed {
		t.Errorf("Close: %v, closed %v; want the wrapped store's Close and its error", err, closed)
	}
}

// answersLate is a store that hands every take to the lateanswer.Receiver
// of its context, as a batched Redis store does with a take its caller
// gave up on, and says so.
type answersLate struct{}

func (answersLate) AnswersLate() bool { return true }

func (answersLate) Take(ctx context.Context, b []quota.Bucket, _ []quota.Result) (bool, error) {
	if la, ok := ctx.Value(lateanswer.Key).(lateanswer.Receiver); ok {
		la.Late(b)(true, []quota.Result{{Allowed: true}}, nil)
	}
	return false, context.DeadlineExceeded
}

type lateRecorder struct{ n int }

func (r *lateRecorder) Late([]quota.Bucket) func(bool, []quota.Result, error) {
	return func(bool, []quota.Result, error) { r.n++ }
}

// TestStoreForwardsLateAnswers: the late answers of a store that gives
// them (lateanswer.Receiver) reach the caller through the instrumented
// store, whose context is the caller's, and the capability is found
// beneath it along Unwrap.
func TestStoreForwardsLateAnswers(t *testing.T) {
	o, err := New()
	if err != nil {
		t.Fatal(err)
	}
	w := o.Store(answersLate{})
	found := false
	for l := range quota.Layers(w) {
		if a, ok := l.(interface{ AnswersLate() bool }); ok && a.AnswersLate() {
			found = true
		}
	}
	if !found {
		t.Fatal("AnswersLate not found along quota.Layers of the instrumented store")
	}
	rec := &lateRecorder{}
	ctx := context.WithValue(context.Background(), lateanswer.Key, lateanswer.Receiver(rec))
	if _, err := w.Take(ctx, []quota.Bucket{{Key: "k"}}, make([]quota.Result, 1)); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Take: %v, want the wrapped store's error", err)
	}
	if rec.n != 1 {
		t.Fatalf("late answers delivered through the wrapper: %d, want 1", rec.n)
	}
}
