package policyfile_test

import (
	"context"
	"errors"
	"path/filepath"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate/concurrency"
	"github.com/floodgate-go/floodgate/policyfile"
)

// The wait: keys of the concurrency: section load into a concurrency.Wait
// for the Limiter and for the adaptive limiter.
func TestLoadWait(t *testing.T) {
	f, err := policyfile.Load([]byte(`rules: []
concurrency:
  global: 100
  wait: {max: 50ms, queue: 200, order: lifo}
  adaptive:
    wait:
      max: 1s
`))
	if err != nil {
		t.Fatal(err)
	}
	if f.Wait == nil || *f.Wait != (concurrency.Wait{Max: 50 * time.Millisecond, Queue: 200, Order: concurrency.LIFO}) {
		t.Fatalf("concurrency.wait: %+v", f.Wait)
	}
	if f.Adaptive == nil || f.Adaptive.Wait != (concurrency.Wait{Max: time.Second}) {
		t.Fatalf("concurrency.adaptive.wait: %+v", f.Adaptive)
	}
}

// Every mistake in a wait: is reported under its path and line.
func TestLoadWaitErrors(t *testing.T) {
	for _, tc := range []struct{ yaml, want string }{
		{"concurrency:\n  wait:\n    max: soon\n", `concurrency.wait.max: "soon" is not a positive duration such as 100ms, at line 4`},
		{"concurrency:\n  wait:\n    max: 1s\n    order: stack\n", `concurrency.wait.order: unknown order "stack" (want fifo, lifo or codel), at line 5`},
		{"concurrency:\n  wait: {max: 1s, queue: 0}\n", "concurrency.wait.queue: 0 must be at least 1, at line 3"},
		{"concurrency:\n  wait: {maxx: 1s}\n", "concurrency.wait.maxx: unknown field, at line 3"},
		{"concurrency:\n  adaptive:\n    min: 2\n    wait:\n      order: random\n", `concurrency.adaptive.wait.order: unknown order "random" (want fifo, lifo or codel), at line 6`},
	} {
		_, err := policyfile.Load([]byte("rules: []\n" + tc.yaml))
		if err == nil || err.Error() != tc.want {
			t.Errorf("Load(%q):\n got %v\nwant %s", tc.yaml, err, tc.want)
		}
	}
	// A File built in Go is checked by the stage's own rules, by path.
	f := &policyfile.File{Wait: &concurrency.Wait{Max: -time.Second}, Adaptive: &concurrency.AdaptiveConfig{Wait: concurrency.Wait{Queue: -1}}}
	want := "concurrency.wait.max: -1s is negative\nconcurrency.adaptive.wait.queue: -1 is negative"
	if err := f.Validate(); err == nil || err.Error() != want {
		t.Fatalf("Validate:\n got %v\nwant %s", err, want)
	}
}

// Watch applies wait: to the Limiter and adaptive.wait: to the adaptive
// limiter, refuses wait: without a Limiter, and a file without them
// returns both to their Go settings.
func TestWatchAppliesWait(t *testing.T) {
	path := filepath.Join(t.TempDir(), "policy.yaml")
	lim, err := concurrency.New(concurrency.WithGlobal(10), concurrency.WithWait(concurrency.Wait{Max: time.Second}))
	if err != nil {
		t.Fatal(err)
	}
	adaptive, err := concurrency.NewAdaptive(concurrency.AdaptiveConfig{})
	if err != nil {
		t.Fatal(err)
	}
	l := mustLimiter(t, newMemstore(t), "rules: []\n")
	writeAtomic(t, path, "rules: []\nconcurrency:\n  wait: {max: 20ms, order: lifo}\n  adaptive: {wait: {max: 30ms, queue: 7}}\n")
	reloads := make(chan reload, 16)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- policyfile.Watch(ctx, path, policyfile.Targets{Limits: l, Concurrency: lim, Adaptive: adaptive},
			policyfile.WithInterval(5*time.Millisecond), policyfile.WithLogger(discardLogger()),
			policyfile.WithOnReload(func(f *policyfile.File, err error) { reloads <- reload{f, err} }))
	}()
	defer func() {
		cancel()
		if err := <-done; !errors.Is(err, context.Canceled) {
			t.Errorf("Watch returned %v", err)
		}
	}()
	if rl := nextReload(t, reloads); rl.err != nil {
		t.Fatal(rl.err)
	}
	if w := lim.Wait(); w != (concurrency.Wait{Max: 20 * time.Millisecond, Queue: concurrency.DefaultQueue, Order: concurrency.LIFO}) {
		t.Fatalf("Limiter wait %+v", w)
	}
	if w := adaptive.Config().Wait; w != (concurrency.Wait{Max: 30 * time.Millisecond, Queue: 7}) {
		t.Fatalf("adaptive wait %+v", w)
	}
	writeAtomic(t, path, "rules: []\n")
	if rl := nextReload(t, reloads); rl.err != nil {
		t.Fatal(rl.err)
	}
	if w := lim.Wait(); w != (concurrency.Wait{Max: time.Second, Queue: concurrency.DefaultQueue}) {
		t.Fatalf("Limiter wait after the section left: %+v, want the Go setting", w)
	}
	if w := adaptive.Config().Wait; w != (concurrency.Wait{}) {
		t.Fatalf("adaptive wait after the section left: %+v", w)
	}

	// wait: for a Watch without a Limiter is refused, by path and line.
	path2 := filepath.Join(t.TempDir(), "policy.yaml")
	writeAtomic(t, path2, "rules: []\nconcurrency:\n  wait: {max: 1s}\n")
	reloads2 := make(chan reload, 4)
	ctx2, cancel2 := context.WithCancel(context.Background())
	done2 := make(chan error, 1)
	go func() {
		done2 <- policyfile.Watch(ctx2, path2, policyfile.Targets{Limits: l, Adaptive: adaptive},
			policyfile.WithInterval(5*time.Millisecond), policyfile.WithLogger(discardLogger()),
			policyfile.WithOnReload(func(f *policyfile.File, err error) { reloads2 <- reload{f, err} }))
	}()
	rl := nextReload(t, reloads2)
	cancel2()
	<-done2
	want := "concurrency.wait: the file sets a concurrency Limiter's settings, but Watch was given none (Targets.Concurrency), at line 3"
	if rl.err == nil || rl.err.Error() != want {
		t.Fatalf("wait: without a Limiter: %v\nwant %s", rl.err, want)
	}
}
