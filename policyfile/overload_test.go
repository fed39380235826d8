package policyfile_test

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/concurrency"
	"github.com/floodgate-go/floodgate/policyfile"
	"github.com/floodgate-go/floodgate/shedder"
	"github.com/floodgate-go/floodgate/testing/clock"
)

const overloadPolicy = `rules: []
shedder:
  thresholds: {test: 0.6, read: 0.7, write: 0.85}
  adaptive:
    min: 8
    max: 400
    window: 200ms
    tolerance: 1.4
    cpu_target: 0.9
    memory_target: 0.8
  fleet:
    capacity: 4000
    reserve: 0.25
concurrency:
  global: 300
  adaptive:
    algorithm: vegas
    min: 4
    max: 200
    percentile: 0.9
    probe_every: 30
    timeout: 2s
    bypass: critical
`

func TestLoadOverloadSections(t *testing.T) {
	p, err := policyfile.Load([]byte(overloadPolicy))
	if err != nil {
		t.Fatal(err)
	}
	sc := p.Shedder
	if sc == nil || sc.Capacity != 8 || sc.Thresholds != (shedder.Thresholds{Test: 0.6, Read: 0.7, Write: 0.85}) {
		t.Fatalf("shedder: %+v", sc)
	}
	if a := sc.Adaptive; a == nil || a.Min != 8 || a.Max != 400 || a.Window != 200*time.Millisecond || a.Tolerance != 1.4 || a.CPUTarget != 0.9 || a.MemoryTarget != 0.8 {
		t.Fatalf("shedder.adaptive: %+v", sc.Adaptive)
	}
	if f := p.Fleet; f == nil || f.Capacity != 4000 || f.Reserve != 0.25 || f.Adaptive != nil {
		t.Fatalf("shedder.fleet: %+v", p.Fleet)
	}
	if p.Global != 300 || p.Adaptive == nil {
		t.Fatalf("concurrency: global %d, adaptive %+v", p.Global, p.Adaptive)
	}
	if a := p.Adaptive; a.Algorithm != concurrency.Vegas || a.Min != 4 || a.Max != 200 || a.Percentile != 0.9 || a.ProbeEvery != 30 || a.Timeout != 2*time.Second || a.Bypass != floodgate.PriorityCritical {
		t.Fatalf("concurrency.adaptive: %+v", a)
	}
	// No sections, no settings.
	if p, err := policyfile.Load([]byte("rules: []\n")); err != nil || p.Shedder != nil || p.Fleet != nil || p.Global != 0 || p.Adaptive != nil {
		t.Fatalf("a policy without the sections: %+v, %v", p, err)
	}
}

// Every mistake is reported under its path and line, the stages' own
// validation included, with the YAML names of the fields.
func TestLoadOverloadErrors(t *testing.T) {
	for _, tc := range []struct {
		yaml string
		want string
	}{
		{"shedder:\n  adaptive:\n    min: 10\n    max: 5\n", "shedder.adaptive.max: 5 must be >= min 10, at line 4"},
		{"shedder:\n  adaptive: {maxx: 5}\n", "shedder.adaptive.maxx: unknown field, at line 2"},
		{"shedder:\n  capacity: 10\n  thresholds: {test: 0.9, read: 0.5}\n", "shedder.thresholds: thresholds test 0.9, read 0.5, write 0.9 must satisfy test <= read <= write, at line 3"},
		{"shedder:\n  capacity: 10\n  thresholds: {write: 1.5}\n", "shedder.thresholds: write threshold 1.5 is out of range (0, 1], at line 3"},
		{"shedder:\n  adaptive:\n    window: fast\n", `shedder.adaptive.window: "fast" is not a positive duration such as 100ms, at line 3`},
		{"shedder:\n  adaptive:\n    tolerance: 1\n", "shedder.adaptive.tolerance: 1 must be a finite number > 1, at line 3"},
		{"shedder:\n  adaptive:\n    cpu_target: 0\n", "shedder.adaptive.cpu_target: 0 must be greater than 0 (leave the key out for the default), at line 3"},
		{"shedder:\n  adaptive:\n    cpu_target: 1.5\n", "shedder.adaptive.cpu_target: 1.5 is out of range [0, 1], at line 3"},
		{"shedder:\n  adaptive:\n    memory_target: 1.5\n", "shedder.adaptive.memory_target: 1.5 is out of range [0, 1], at line 3"},
		{"shedder:\n  fleet:\n    adaptive: {memory_target: 0}\n", "shedder.fleet.adaptive.memory_target: 0 must be greater than 0 (leave the key out for the default), at line 3"},
		{"shedder:\n  fleet:\n    capacity: 100\n    reserve: 1.5\n", "shedder.fleet.reserve: 1.5 is out of range (0, 1), at line 4"},
		{"shedder:\n  fleet:\n    adaptive: {min: 9, max: 3}\n", "shedder.fleet.adaptive.max: 3 must be >= min 9, at line 3"},
		{"shedder:\n  thresholds: {test: 0.5}\n", "shedder.capacity: required: a fixed capacity, or adaptive: for one that follows the service, at line 2"},
		{"shedder:\n  fleet: {reserve: 0.5}\n", "shedder.fleet.capacity: required: a fixed fleet capacity, or adaptive: for one that follows the fleet, at line 2"},
		{"concurrency:\n  adaptive:\n    algorithm: bbr\n", `concurrency.adaptive.algorithm: unknown algorithm "bbr" (want gradient2, vegas or aimd), at line 3`},
		{"concurrency:\n  adaptive:\n    initial: 500\n    max: 100\n", "concurrency.adaptive.initial: 500 must lie in [min 1, max 100], at line 3"},
		{"concurrency:\n  adaptive:\n    percentile: 2\n", "concurrency.adaptive.percentile: 2 is out of range (0, 1], at line 3"},
		{"concurrency:\n  adaptive:\n    alpha: 6\n    beta: 3\n", "concurrency.adaptive.alpha: 6 and beta 3 must satisfy 1 <= alpha < beta (finite), at line 3"},
		{"concurrency:\n  global: 0\n", "concurrency.global: 0 must be at least 1, at line 2"},
		{"concurrency:\n  adaptive:\n    min_samples: many\n", `concurrency.adaptive.min_samples: must be an integer, got "many", at line 3`},
		{"concurrency: [1]\n", "concurrency: must be a mapping, got a list, at line 1"},
		{"concurrency:\n  adaptive: {bypass: vip}\n", `concurrency.adaptive.bypass: unknown priority "vip" (want critical, write, read or test), at line 2`},
	} {
		_, err := policyfile.Load([]byte("rules: []\n" + tc.yaml))
		// Line numbers above count from the section: the policy adds one line.
		want := shiftLine(tc.want)
		if err == nil || err.Error() != want {
			t.Errorf("Load(%q):\n got %v\nwant %s", tc.yaml, err, want)
		}
	}
}

// shiftLine adds 1 to the ", at line N" of s.
func shiftLine(s string) string {
	i := strings.LastIndex(s, ", at line ")
	if i < 0 {
		return s
	}
	n := 0
	for _, c := range s[i+len(", at line "):] {
		n = n*10 + int(c-'0')
	}
	return s[:i] + ", at line " + itoa(n+1)
}

func itoa(n int) string {
	if n < 10 {
		return string(rune('0' + n))
	}
	return itoa(n/10) + string(rune('0'+n%10))
}

// A Policy built in Go is checked the same way.
func TestValidateOverloadInGo(t *testing.T) {
	f := &policyfile.File{Adaptive: &concurrency.AdaptiveConfig{Smoothing: 3}}
	if err := f.Validate(); err == nil || err.Error() != "concurrency.adaptive.smoothing: 3 is out of range (0, 1]" {
		t.Fatalf("Validate: %v", err)
	}
}

type cpuConst float64

func (c cpuConst) Utilization() (float64, error) { return float64(c), nil }

// Watch applies the sections to the stages on every
// reload; a reload a stage would refuse (a CPU target for a Shedder
// without a meter, a section for a stage Watch was not given) changes
// neither the rules nor any stage; a file without the sections returns
// every stage to its Go settings.
func TestWatchAppliesOverload(t *testing.T) {
	path := filepath.Join(t.TempDir(), "policy.yaml")
	clk := clock.New(time.Time{})
	shed, err := shedder.New(100, shedder.WithClock(clk))
	if err != nil {
		t.Fatal(err)
	}
	lim, err := concurrency.New(concurrency.WithGlobal(1000))
	if err != nil {
		t.Fatal(err)
	}
	adaptive, err := concurrency.NewAdaptive(concurrency.AdaptiveConfig{Min: 2, Max: 50, Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	l := mustLimiter(t, newMemstore(t), "rules: []\n")
	const good = `rules:
  - {name: first, key: [user], rate: 10/1s}
shedder:
  capacity: 40
  adaptive: {min: 20, max: 300}
concurrency:
  global: 200
  adaptive: {algorithm: aimd, min: 5, max: 80}
`
	writeAtomic(t, path, good)
	reloads := make(chan reload, 16)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- policyfile.Watch(ctx, path, policyfile.Targets{Limits: l, Shedder: shed, Concurrency: lim, Adaptive: adaptive},
			policyfile.WithInterval(5*time.Millisecond), policyfile.WithLogger(discardLogger()),
			policyfile.WithOnReload(func(f *policyfile.File, err error) { reloads <- reload{f, err} }))
	}()
	defer func() {
		cancel()
		if err := <-done; !errors.Is(err, context.Canceled) {
			t.Errorf("Watch returned %v", err)
		}
	}()
	applied := func(step string, capacity, min, global int64, alg concurrency.AdaptiveAlgorithm) {
		t.Helper()
		sc := shed.Config()
		gotMin := int64(0)
		if sc.Adaptive != nil {
			gotMin = sc.Adaptive.Min
		}
		if shed.Capacity() != capacity || gotMin != min || lim.Global() != global || adaptive.Config().Algorithm != alg {
			t.Fatalf("%s: shedder capacity %d (adaptive min %d), global %d, algorithm %s; want %d (%d), %d, %s",
				step, shed.Capacity(), gotMin, lim.Global(), adaptive.Config().Algorithm, capacity, min, global, alg)
		}
	}
	if rl := nextReload(t, reloads); rl.err != nil {
		t.Fatalf("first reload: %v", rl.err)
	}
	applied("good", 40, 20, 200, concurrency.AIMD)
	if adaptive.Limit() != 20 || adaptive.Config().Max != 80 {
		t.Fatalf("adaptive limit %d (max %d): want the learnt 20 kept within the new [5, 80]", adaptive.Limit(), adaptive.Config().Max)
	}

	for _, bad := range []struct{ yaml, want string }{
		{strings.Replace(good, "{min: 20, max: 300}", "{min: 20, max: 300, cpu_target: 0.8}", 1),
			"shedder.adaptive.cpu_target: 0.8 needs a CPU meter, and the Shedder has none (build it WithCPU), at line 5"},
		{strings.Replace(good, "{min: 20, max: 300}", "{min: 20, max: 300, memory_target: 0.8}", 1),
			"shedder.adaptive.memory_target: 0.8 needs a memory meter, and the Shedder has none (give it in AdaptiveCapacity.Memory), at line 5"},
		{good + "  fleet_typo: 1\n", "concurrency.fleet_typo: unknown field, at line 9"},
		{strings.Replace(good, "capacity: 40", "capacity: 40\n  fleet: {capacity: 10}", 1),
			"shedder.fleet: the file sets a Fleet's settings, but Watch was given none (Targets.Fleet), at line 5"},
	} {
		writeAtomic(t, path, bad.yaml)
		rl := nextReload(t, reloads)
		if rl.err == nil || rl.err.Error() != bad.want {
			t.Fatalf("bad reload: %v\nwant %s", rl.err, bad.want)
		}
		if l.Policy().Rules[0].Name != "first" {
			t.Fatal("a bad reload replaced the rules")
		}
		applied("after a bad reload", 40, 20, 200, concurrency.AIMD)
	}

	writeAtomic(t, path, "rules:\n  - {name: second, key: [user], rate: 10/1s}\n")
	if rl := nextReload(t, reloads); rl.err != nil {
		t.Fatalf("reload without sections: %v", rl.err)
	}
	applied("sections removed", 100, 0, 1000, concurrency.Gradient2)
	if l.Policy().Rules[0].Name != "second" {
		t.Fatal("the rules were not reloaded")
	}

	// With a meter, the CPU target is taken.
	shedCPU, err := shedder.New(10, shedder.WithCPU(cpuConst(0.5)))
	if err != nil {
		t.Fatal(err)
	}
	p, err := policyfile.Load([]byte("rules: []\nshedder:\n  adaptive: {cpu_target: 0.8}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if err := shedCPU.Reconfigure(*p.Shedder); err != nil || shedCPU.Config().Adaptive.CPUTarget != 0.8 {
		t.Fatalf("Reconfigure with a meter: %v", err)
	}
}
