package stack

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// TestWatchPolicyAppliesOverloadSections: a reload that adds shedder: and
// concurrency: sections resizes the running stages; a reload that fails
// to load leaves them as they were; a reload without the sections returns
// them to the stack's sizes.
func TestWatchPolicyAppliesOverloadSections(t *testing.T) {
	base, err := os.ReadFile("../../policy.yaml")
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "policy.yaml")
	write := func(extra string) {
		t.Helper()
		// New content each time (the watcher compares what it reads), and a new
		// mtime as an editor would leave.
		if err := os.WriteFile(path, append(append([]byte{}, base...), extra...), 0o644); err != nil {
			t.Fatal(err)
		}
		later := time.Now().Add(time.Duration(len(extra)+1) * time.Second)
		if err := os.Chtimes(path, later, later); err != nil {
			t.Fatal(err)
		}
	}
	write("")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	s, err := New(ctx, Config{PolicyPath: path, Logger: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError}))})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close(context.Background())
	if s.shed.Capacity() != ShedCapacity || s.conc.Global() != MaxInFlight {
		t.Fatalf("at start: capacity %d, global %d; want %d and %d", s.shed.Capacity(), s.conc.Global(), ShedCapacity, MaxInFlight)
	}
	done := make(chan struct{})
	go func() { defer close(done); s.WatchPolicy(ctx) }()
	defer func() { cancel(); <-done }()

	waitFor := func(what string, ok func() bool) {
		t.Helper()
		for deadline := time.Now().Add(10 * time.Second); !ok(); time.Sleep(20 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("%s: not applied within 10s (capacity %d, global %d)", what, s.shed.Capacity(), s.conc.Global())
			}
		}
	}
	write("\nshedder:\n  capacity: 7\nconcurrency:\n  global: 9\n")
	waitFor("sections added", func() bool { return s.shed.Capacity() == 7 && s.conc.Global() == 9 })

	write("\nshedder:\n  capacity: -1\nconcurrency:\n  global: 3\n") // fails to load
	time.Sleep(2500 * time.Millisecond)                              // two watch intervals
	if s.shed.Capacity() != 7 || s.conc.Global() != 9 {
		t.Fatalf("after a bad reload: capacity %d, global %d; want 7 and 9 kept", s.shed.Capacity(), s.conc.Global())
	}

	write("\n# the sections removed\n")
	waitFor("sections removed", func() bool { return s.shed.Capacity() == ShedCapacity && s.conc.Global() == MaxInFlight })
}
