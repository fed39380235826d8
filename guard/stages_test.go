package guard

import (
	"context"
	"fmt"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"runtime/debug"
	"strings"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/shedder"
	"github.com/floodgate-go/floodgate/shedder/cpu"
	"github.com/floodgate-go/floodgate/shedder/mem"
)

// The policy's per-key caps (concurrency: per_key:) cap each user's
// requests in flight, in the chain: a user's third request at once is
// refused by the cap, another user's is not, and a request without a user
// is not counted by it.
func TestPerKeyInFlight(t *testing.T) {
	t.Parallel()
	g, err := New(context.Background(), WithInProcess(), WithLogger(quiet), WithPolicy([]byte(oneRule+`
concurrency:
  per_key:
    - {name: per-user-in-flight, key: user, cap: 2}
`)))
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close(context.Background())
	admit := func(user string) (floodgate.Decision, floodgate.Done) {
		t.Helper()
		d, done, err := g.Chain().Admit(context.Background(), &floodgate.Request{Method: "GET /", Identity: floodgate.Identity{User: user}})
		if err != nil {
			t.Fatal(err)
		}
		return d, done
	}
	var dones []floodgate.Done
	for range 2 {
		d, done := admit("alice")
		if !d.Allowed {
			t.Fatalf("alice's request under a cap of 2: %+v", d)
		}
		dones = append(dones, done)
	}
	if d, _ := admit("alice"); d.Allowed || d.Policy != "per-user-in-flight" || d.Stage != floodgate.StageConcurrency {
		t.Fatalf("alice's third request at once: %+v, want refused by per-user-in-flight", d)
	}
	for _, user := range []string{"bob", "", ""} {
		d, done := admit(user)
		if !d.Allowed {
			t.Fatalf("a request of user %q: %+v, want admitted", user, d)
		}
		dones = append(dones, done)
	}
	for _, done := range dones {
		done(floodgate.Result{})
	}
	if d, done := admit("alice"); !d.Allowed {
		t.Fatalf("alice's request once hers finished: %+v", d)
	} else {
		done(floodgate.Result{})
	}
}

// A reload that changes the shedder: and concurrency: sections resizes
// the running stages, per-key caps included; a reload that fails to load,
// or adds a per-key cap New did not make, leaves them as they were; a
// reload without the sections returns them to what the file said at New.
func TestPolicyFileResizesStages(t *testing.T) {
	t.Parallel()
	const atNew = `
shedder:
  capacity: 64
concurrency:
  global: 128
  per_key:
    - {name: per-user-in-flight, key: user, cap: 8}
`
	path := filepath.Join(t.TempDir(), "policy.yaml")
	write := func(s string) {
		t.Helper()
		if err := os.WriteFile(path+".tmp", []byte(oneRule+s), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(path+".tmp", path); err != nil {
			t.Fatal(err)
		}
	}
	write(atNew)
	var logs syncBuffer
	g, err := New(context.Background(), WithInProcess(), WithLogger(slog.New(slog.NewTextHandler(&logs, nil))),
		WithPolicyFile(path), WithPolicyInterval(10*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close(context.Background())
	sizes := func() (capacity, global, perUser int64) {
		return g.targets.Shedder.Capacity(), g.targets.Concurrency.Global(), g.targets.Concurrency.PerKeyCaps()[0].Cap
	}
	is := func(c, gl, pu int64) func() bool {
		return func() bool { a, b, d := sizes(); return a == c && b == gl && d == pu }
	}
	if !is(64, 128, 8)() {
		t.Fatal(sizesOf(sizes))
	}
	write("\nshedder:\n  capacity: 7\nconcurrency:\n  global: 9\n  per_key:\n    - {name: per-user-in-flight, key: user, cap: 2}\n")
	waitFor(t, "the sections applied", is(7, 9, 2))

	refused := func(s, why string) {
		t.Helper()
		before := strings.Count(logs.String(), "policy reload failed")
		write(s)
		waitFor(t, "the refusal of "+why, func() bool { return strings.Count(logs.String(), "policy reload failed") > before })
		if !is(7, 9, 2)() {
			t.Fatalf("after %s: %s, want 7, 9 and 2 kept", why, sizesOf(sizes))
		}
	}
	refused("\nshedder:\n  capacity: -1\nconcurrency:\n  global: 3\n", "a file that does not load")
	refused("\nconcurrency:\n  per_key:\n    - {name: per-tenant, key: tenant, cap: 3}\n", "a per-key cap New did not make")
	if !strings.Contains(logs.String(), `the Limiter has no per-key cap \"per-tenant\"`) {
		t.Errorf("the refused per-key cap is not named in the log:\n%s", logs.String())
	}

	write("\n# the sections removed\n")
	waitFor(t, "the sizes of the file at New", is(64, 128, 8))
}

func sizesOf(sizes func() (int64, int64, int64)) string {
	c, g, p := sizes()
	return fmt.Sprintf("shedder capacity %d, global %d, per user %d", c, g, p)
}

// A cpu_target in the policy's shedder.adaptive is read against the
// container's CPU: taken where package shedder/cpu reads it, an error
// naming why where it cannot.
func TestShedderCPUTarget(t *testing.T) {
	t.Parallel()
	g, err := New(context.Background(), WithInProcess(), WithLogger(quiet), WithPolicy([]byte(oneRule+`
shedder:
  adaptive: {min: 8, max: 256, cpu_target: 0.9}
`)))
	if _, cpuErr := cpu.New(); cpuErr != nil {
		if err == nil || !strings.Contains(err.Error(), "shedder.adaptive.cpu_target 0.9: the CPU cannot be read") {
			t.Fatalf("New with a cpu_target and no readable CPU (%v): %v", cpuErr, err)
		}
		return
	}
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close(context.Background())
	if a := g.targets.Shedder.Config().Adaptive; a == nil || a.CPUTarget != 0.9 || g.targets.Shedder.Capacity() != 8 {
		t.Fatalf("shedder: %+v (capacity %d), want adaptive from 8 with cpu_target 0.9", a, g.targets.Shedder.Capacity())
	}
}

// A memory_target in the policy's shedder.adaptive is read against the
// memory limit package shedder/mem finds (GOMEMLIMIT here, set as a
// service's environment would); without a limit it is an error naming
// why. Not parallel: it sets the process's memory limit.
func TestShedderMemoryTarget(t *testing.T) {
	policy := WithPolicy([]byte(oneRule + `
shedder:
  adaptive: {min: 8, max: 256, memory_target: 0.8}
`))
	old := debug.SetMemoryLimit(math.MaxInt64)
	defer debug.SetMemoryLimit(old)
	if _, memErr := mem.New(); memErr != nil {
		_, err := New(context.Background(), WithInProcess(), WithLogger(quiet), policy)
		if err == nil || !strings.Contains(err.Error(), "guard: policy shedder.adaptive.memory_target 0.8: mem: no memory limit is known: GOMEMLIMIT is not set") {
			t.Fatalf("New with a memory_target and no memory limit (%v): %v", memErr, err)
		}
	}
	debug.SetMemoryLimit(1 << 30)
	g, err := New(context.Background(), WithInProcess(), WithLogger(quiet), policy)
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close(context.Background())
	a := g.targets.Shedder.Config().Adaptive
	if a == nil || a.MemoryTarget != 0.8 || a.Memory == nil || g.targets.Shedder.Capacity() != 8 {
		t.Fatalf("shedder: %+v (capacity %d), want adaptive from 8 with memory_target 0.8 and a meter", a, g.targets.Shedder.Capacity())
	}
	// A fixed section keeps the meter for a reload that adds a target.
	g2, err := New(context.Background(), WithInProcess(), WithLogger(quiet), WithPolicy([]byte(oneRule+"shedder: {capacity: 40}\n")))
	if err != nil {
		t.Fatal(err)
	}
	defer g2.Close(context.Background())
	if c := g2.targets.Shedder.Config(); c.Adaptive != nil || c.Capacity != 40 {
		t.Fatalf("fixed section: %+v", c)
	}
	if err := g2.targets.Shedder.Check(shedder.Config{Capacity: 40, Adaptive: &shedder.AdaptiveCapacity{MemoryTarget: 0.8}}); err != nil {
		t.Errorf("a reload adding a memory_target to a fixed section: %v", err)
	}
}
