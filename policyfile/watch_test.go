package policyfile_test

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
	"github.com/floodgate-go/floodgate/policyfile"
	"github.com/floodgate-go/floodgate/testing/clock"
	"github.com/floodgate-go/floodgate/tiers/memstore"
)

type reload struct {
	f   *policyfile.File
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
		done <- policyfile.Watch(ctx, path, policyfile.Targets{Limits: l},
			policyfile.WithInterval(5*time.Millisecond),
			policyfile.WithLogger(slog.New(slog.NewTextHandler(&logs, nil))),
			policyfile.WithOnReload(func(f *policyfile.File, err error) { reloads <- reload{f, err} }))
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
	if rl := nextReload(t, reloads); rl.err != nil || rl.f.Limits.Rules[0].Name != "first" {
		t.Fatalf("first reload: %+v", rl)
	}
	if d := admit(t, l, r); !d.Allowed || d.Policy != "first" {
		t.Fatalf("under good1: %+v", d)
	}

	writeAtomic(t, path, broken)
	rl := nextReload(t, reloads)
	if rl.f != nil || rl.err == nil || rl.err.Error() != `rules[0].rate: "1/hour" is not N/duration (write 1/1h), at line 2` {
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
	if rl := nextReload(t, reloads); rl.err != nil || rl.f.Limits.Rules[0].Name != "second" {
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
		{policyfile.Watch(ctx, "", policyfile.Targets{Limits: l}), "policyfile: Watch: path is empty"},
		{policyfile.Watch(ctx, "p", policyfile.Targets{}), "policyfile: Watch: Targets.Limits is nil"},
		{policyfile.Watch(ctx, "p", policyfile.Targets{Limits: l}, policyfile.WithInterval(0)), "policyfile: WithInterval: interval 0s must be > 0"},
		{policyfile.Watch(ctx, "p", policyfile.Targets{Limits: l}, policyfile.WithLogger(nil)), "policyfile: WithLogger: logger is nil"},
		{policyfile.Watch(ctx, "p", policyfile.Targets{Limits: l}, nil), "policyfile: nil Option"},
		// Every problem is reported, not only the first.
		{policyfile.Watch(ctx, "", policyfile.Targets{}, policyfile.WithInterval(-1), policyfile.WithOnReload(nil)),
			"policyfile: Watch: Targets.Limits is nil\npolicyfile: Watch: path is empty\npolicyfile: WithInterval: interval -1ns must be > 0"},
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
		done <- policyfile.Watch(ctx, path, policyfile.Targets{Limits: l}, policyfile.WithInterval(5*time.Millisecond), policyfile.WithLogger(discardLogger()),
			policyfile.WithOnReload(func(f *policyfile.File, err error) { reloads <- reload{f, err} }))
	}()
	defer func() {
		cancel()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			t.Error("Watch did not return within 5s of cancel")
		}
	}()
	if rl := nextReload(t, reloads); rl.f != nil || !errors.Is(rl.err, os.ErrNotExist) {
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

// TestWatchOptionErrors: Watch reports every bad option before it starts.
func TestWatchOptionErrors(t *testing.T) {
	l := mustLimiter(t, newMemstore(t), "rules:\n  - {name: a, rate: 1/1s}\n")
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	err := policyfile.Watch(ctx, "policy.yaml", policyfile.Targets{Limits: l}, policyfile.WithInterval(0), nil)
	if err == nil || !strings.Contains(err.Error(), "WithInterval") || !strings.Contains(err.Error(), "nil") {
		t.Fatalf("Watch = %v, want errors naming WithInterval and the nil option", err)
	}
}

// A file written in place (truncated, then written) can be polled
// half-written. A prefix that is a valid policy, cut after a rule, is not
// applied when the rest arrives before the next poll, nor is a prefix cut
// mid-rule reported as a failure; the whole file is applied at the poll
// that reads it again unchanged.
func TestWatchIgnoresHalfWrittenFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "policy.yaml")
	const start = "rules:\n  - {name: start, key: [user], rate: 1/1h}\n"
	const full = "rules:\n  - {name: first, key: [user], rate: 5/1h}\n  - {name: second, key: [ip], rate: 5/1h}\n"
	const full2 = "rules:\n  - {name: third, key: [user], rate: 7/1h}\n  - {name: fourth, key: [ip], rate: 7/1h}\n"
	validHalf := full[:strings.Index(full, "  - {name: second")]
	if f, err := policyfile.Load([]byte(validHalf)); err != nil || len(f.Limits.Rules) != 1 {
		t.Fatalf("the prefix %q should be a valid policy of one rule: %v", validHalf, err)
	}
	brokenHalf := full2[:strings.Index(full2, "rate: 7/1h}")]
	if _, err := policyfile.Load([]byte(brokenHalf)); err == nil {
		t.Fatalf("the prefix %q should not load", brokenHalf)
	}
	// writeInPlace truncates path and writes content into the same file,
	// as an editor or a plain shell redirection does.
	writeInPlace := func(content string) {
		t.Helper()
		if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	// appendRest finishes the write begun by writeInPlace.
	appendRest := func(rest string) {
		t.Helper()
		f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := f.WriteString(rest); err != nil {
			t.Fatal(err)
		}
		if err := f.Close(); err != nil {
			t.Fatal(err)
		}
	}

	writeInPlace(start)
	l := mustLimiter(t, newMemstore(t), "rules: []\n")
	var reloads []reload
	poll, err := policyfile.NewPoller(path, policyfile.Targets{Limits: l}, policyfile.WithLogger(discardLogger()),
		policyfile.WithOnReload(func(f *policyfile.File, err error) { reloads = append(reloads, reload{f, err}) }))
	if err != nil {
		t.Fatal(err)
	}
	rules := func() string {
		var names []string
		for _, r := range l.Policy().Rules {
			names = append(names, r.Name)
		}
		return strings.Join(names, ",")
	}
	step := func(what, want string, wantReloads int) {
		t.Helper()
		poll()
		if got := rules(); got != want || len(reloads) != wantReloads {
			t.Fatalf("%s: rules %q after %d reports, want %q after %d (reports: %+v)", what, got, len(reloads), want, wantReloads, reloads)
		}
	}
	poll() // the file as Watch finds it, read once
	step("the file as Watch found it, read again unchanged", "start", 1)

	writeInPlace(validHalf)
	step("a poll meets the file cut after its first rule", "start", 1)
	appendRest(full[len(validHalf):])
	step("the first poll of the whole file", "start", 1)
	step("the whole file read again unchanged", "first,second", 2)

	writeInPlace(brokenHalf)
	step("a poll meets the file cut mid-rule", "first,second", 2)
	appendRest(full2[len(brokenHalf):])
	step("the first poll of the whole file", "first,second", 2)
	step("the whole file read again unchanged", "third,fourth", 3)
	step("nothing changed", "third,fourth", 3)
	for i, rl := range reloads {
		if rl.err != nil || rl.f == nil {
			t.Errorf("report %d: %+v, want only successful reloads", i, rl)
		}
	}
}
