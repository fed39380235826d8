package tiers_test

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/testing/clock"
	"github.com/floodgate-go/floodgate/tiers"
	"github.com/floodgate-go/floodgate/tiers/memstore"
)

type reload struct {
	p   *tiers.Policy
	err error
}

// writeAtomic replaces path's content in one rename, as deploy tools do.
func writeAtomic(t *testing.T, path, content string) {
	t.Helper()
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

func nextReload(t *testing.T, ch <-chan reload) reload {
	t.Helper()
	select {
	case r := <-ch:
		return r
	case <-time.After(5 * time.Second):
		t.Fatal("no reload reported within 5s")
		return reload{}
	}
}

// lockedBuffer is an io.Writer safe for the Watch goroutine and the test.
type lockedBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// Good -> broken -> good: the broken file is reported and leaves the
// previous policy deciding; the next good one is swapped in.
func TestWatchGoodBrokenGood(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "policy.yaml")
	const good1 = "rules:\n  - {name: first, key: [user], rate: 1/1h}\n"
	const broken = "rules:\n  - {name: first, key: [user], rate: 1/hour}\n"
	const good2 = "rules:\n  - {name: second, key: [user], rate: 2/1h}\n"
	writeAtomic(t, path, good1)

	s := newMemstore(t, memstore.WithClock(clock.New(time.Time{})))
	l := mustLimiter(t, s, "rules: []\n")
	reloads := make(chan reload, 16)
	var logs lockedBuffer
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- tiers.Watch(ctx, path, l,
			tiers.WithWatchInterval(5*time.Millisecond),
			tiers.WithWatchLogger(slog.New(slog.NewTextHandler(&logs, nil))),
			tiers.WithOnReload(func(p *tiers.Policy, err error) { reloads <- reload{p, err} }))
	}()
	defer func() {
		cancel()
		select {
		case err := <-done:
			if !errors.Is(err, context.Canceled) {
				t.Errorf("Watch returned %v, want context.Canceled", err)
			}
		case <-time.After(5 * time.Second):
			t.Error("Watch did not return within 5s of cancel")
		}
	}()

	r := &floodgate.Request{Method: "/a.B/C", Identity: floodgate.Identity{User: "u"}}
	if rl := nextReload(t, reloads); rl.err != nil || rl.p.Rules[0].Name != "first" {
		t.Fatalf("first reload: %+v", rl)
	}
	if d := admit(t, l, r); !d.Allowed || d.Policy != "first" {
		t.Fatalf("under good1: %+v", d)
	}

	writeAtomic(t, path, broken)
	rl := nextReload(t, reloads)
	if rl.p != nil || rl.err == nil || rl.err.Error() != `rules[0].rate: "1/hour" is not N/duration, at line 2` {
		t.Fatalf("broken reload: %+v", rl)
	}
	if l.Policy().Rules[0].Name != "first" {
		t.Fatalf("a broken file replaced the policy")
	}
	// The old policy still decides: its bucket (1/1h) is exhausted.
	if d := admit(t, l, r); d.Allowed || d.Policy != "first" {
		t.Fatalf("under broken file: %+v, want first to deny", d)
	}
	if !strings.Contains(logs.String(), "policy reload failed") {
		t.Errorf("failure not logged: %s", logs.String())
	}

	writeAtomic(t, path, good2)
	if rl := nextReload(t, reloads); rl.err != nil || rl.p.Rules[0].Name != "second" {
		t.Fatalf("third reload: %+v", rl)
	}
	if d := admit(t, l, r); !d.Allowed || d.Policy != "second" || d.Remaining != 1 {
		t.Fatalf("under good2: %+v", d)
	}
	// Unchanged content is not reloaded again.
	select {
	case rl := <-reloads:
		t.Fatalf("reload without a change: %+v", rl)
	case <-time.After(50 * time.Millisecond):
	}
}

func TestWatchBadArguments(t *testing.T) {
	l := mustLimiter(t, newMemstore(t), "rules: []\n")
	ctx := context.Background()
	for _, tc := range []struct {
		err  error
		want string
	}{
		{tiers.Watch(ctx, "", l), "tiers: Watch: path is empty"},
		{tiers.Watch(ctx, "p", nil), "tiers: Watch: limiter is nil"},
		{tiers.Watch(ctx, "p", l, tiers.WithWatchInterval(0)), "tiers: WithWatchInterval: interval 0s must be > 0"},
		{tiers.Watch(ctx, "p", l, tiers.WithWatchLogger(nil)), "tiers: WithWatchLogger: logger is nil"},
		{tiers.Watch(ctx, "p", l, nil), "tiers: nil WatchOption"},
		// Every problem is reported, not only the first.
		{tiers.Watch(ctx, "", nil, tiers.WithWatchInterval(-1), tiers.WithOnReload(nil)),
			"tiers: Watch: limiter is nil\ntiers: Watch: path is empty\ntiers: WithWatchInterval: interval -1ns must be > 0"},
	} {
		if tc.err == nil || tc.err.Error() != tc.want {
			t.Errorf("Watch error = %v, want %s", tc.err, tc.want)
		}
	}
}

func discardLogger() *slog.Logger { return slog.New(slog.DiscardHandler) }

// A missing file is reported once (not on every poll), the policy in force
// keeps deciding, and the file's appearance is picked up.
func TestWatchMissingFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "later.yaml")
	l := mustLimiter(t, newMemstore(t), "rules:\n  - {name: old, rate: 1/1s}\n")
	reloads := make(chan reload, 16)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- tiers.Watch(ctx, path, l, tiers.WithWatchInterval(5*time.Millisecond), tiers.WithWatchLogger(discardLogger()),
			tiers.WithOnReload(func(p *tiers.Policy, err error) { reloads <- reload{p, err} }))
	}()
	defer func() {
		cancel()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			t.Error("Watch did not return within 5s of cancel")
		}
	}()
	if rl := nextReload(t, reloads); rl.p != nil || !errors.Is(rl.err, os.ErrNotExist) {
		t.Fatalf("first report: %+v, want a not-exist error", rl)
	}
	select {
	case rl := <-reloads:
		t.Fatalf("the same failure reported twice: %+v", rl)
	case <-time.After(50 * time.Millisecond):
	}
	if l.Policy().Rules[0].Name != "old" {
		t.Fatal("policy replaced")
	}
	writeAtomic(t, path, "rules:\n  - {name: new, rate: 1/1s}\n")
	if rl := nextReload(t, reloads); rl.err != nil || l.Policy().Rules[0].Name != "new" {
		t.Fatalf("after the file appeared: %+v, policy %s", rl, l.Policy().Rules[0].Name)
	}
}
