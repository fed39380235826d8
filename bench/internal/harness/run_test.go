package harness

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"
)

// TestRunCountsEveryOperationOnce drives Run with an operation budget that
// ends the phase before its duration, so every count is known exactly.
func TestRunCountsEveryOperationOnce(t *testing.T) {
	t.Parallel()
	var calls atomic.Int64
	var seen [10]atomic.Int64
	errBoom := errors.New("boom")
	load := Load{Concurrency: 4, Keys: 10, Warmup: 0, Duration: time.Minute, MaxOps: 4000, Seed: 7}
	st, err := Run(context.Background(), load, func() Op {
		return func(_ context.Context, k int) (bool, error) {
			n := calls.Add(1)
			seen[k].Add(1)
			switch {
			case n%100 == 0:
				return false, errBoom
			case n%2 == 0:
				return false, nil
			}
			return true, nil
		}
	}, Probe{})
	if err != nil {
		t.Fatal(err)
	}
	if calls.Load() != 4000 {
		t.Fatalf("%d calls, want exactly the budget 4000", calls.Load())
	}
	if st.Ops != 3960 || st.Errors != 40 || st.Allowed != 2000 {
		t.Errorf("ops/errors/allowed = %d/%d/%d, want 3960/40/2000", st.Ops, st.Errors, st.Allowed)
	}
	if !errors.Is(st.FirstErr, errBoom) {
		t.Errorf("first error %v, want boom", st.FirstErr)
	}
	if st.Latency.Count() != st.Ops {
		t.Errorf("%d latencies for %d ops", st.Latency.Count(), st.Ops)
	}
	for k := range seen {
		if seen[k].Load() == 0 {
			t.Errorf("key %d never drawn in 4000 uniform draws", k)
		}
	}
	if st.Elapsed >= load.Duration {
		t.Errorf("phase took %s: the budget did not end it", st.Elapsed)
	}
}

// TestRunStopsAtDuration: with an operation budget it cannot spend, Run
// ends the measured phase at its duration: it returns (waited for, with a
// deadline many times the 100 ms phase), Elapsed is at least the duration
// (it is measured from before the timer starts), and no more operations
// ran than 1 ms sleeps fit in it on 2 goroutines. How many ran is the
// scheduler's business; TestRunCountsEveryOperationOnce counts them
// exactly.
func TestRunStopsAtDuration(t *testing.T) {
	t.Parallel()
	load := Load{Concurrency: 2, Keys: 1, Warmup: 10 * time.Millisecond, Duration: 100 * time.Millisecond, MaxOps: 1 << 40}
	type result struct {
		st  Stats
		err error
	}
	done := make(chan result, 1)
	go func() {
		st, err := Run(context.Background(), load, func() Op {
			return func(context.Context, int) (bool, error) {
				time.Sleep(time.Millisecond)
				return true, nil
			}
		}, Probe{})
		done <- result{st, err}
	}()
	var r result
	select {
	case r = <-done:
	case <-time.After(time.Minute):
		t.Fatal("Run did not return within a minute of its 100ms phase: the duration did not end it")
	}
	st, err := r.st, r.err
	if err != nil {
		t.Fatal(err)
	}
	if st.Elapsed < 100*time.Millisecond {
		t.Errorf("elapsed %s, want at least the 100ms duration", st.Elapsed)
	}
	if limit := 2 * uint64(st.Elapsed/time.Millisecond); st.Ops > limit {
		t.Errorf("%d ops of at least 1ms each on 2 goroutines in %s (at most %d)", st.Ops, st.Elapsed, limit)
	}
}

func TestParseRedisAddr(t *testing.T) {
	for in, want := range map[string]string{
		"127.0.0.1:6380":          "127.0.0.1:6380",
		"redis://127.0.0.1:7000/": "127.0.0.1:7000",
		" [::1]:6379 ":            "[::1]:6379",
	} {
		o, err := ParseRedisAddr(in)
		if err != nil || o.Addr != want {
			t.Errorf("ParseRedisAddr(%q) = %v, %v; want Addr %s", in, o, err, want)
		}
	}
	for _, in := range []string{"", "localhost", "http//x", "ftp://127.0.0.1:21"} {
		if o, err := ParseRedisAddr(in); err == nil {
			t.Errorf("ParseRedisAddr(%q) = %+v, want an error", in, o)
		}
	}
}

func TestStatsAddAccumulatesRounds(t *testing.T) {
	h1, h2 := &Histogram{}, &Histogram{}
	h1.Record(time.Millisecond)
	h2.Record(3 * time.Millisecond)
	var s Stats
	s.Add(Stats{Ops: 10, Allowed: 9, Elapsed: time.Second, Latency: h1, Mallocs: 50, CPU: 2 * time.Millisecond, CPUKnown: true, RoundTrips: 10, Writes: 10})
	s.Add(Stats{Ops: 30, Allowed: 30, Elapsed: time.Second, Latency: h2, Mallocs: 150, CPU: 6 * time.Millisecond, CPUKnown: true, RoundTrips: 30, Writes: 3})
	if s.Ops != 40 || s.Allowed != 39 || s.PerSecond() != 20 || s.Per(float64(s.Mallocs)) != 5 || s.Per(float64(s.Writes)) != 13.0/40 {
		t.Errorf("accumulated %+v", s)
	}
	if s.Rounds != 2 || s.Best != 30 {
		t.Errorf("rounds %d best %v, want 2 and 30/s", s.Rounds, s.Best)
	}
	if !s.CPUKnown || s.RedisCPUKnown || s.Latency.Count() != 2 || s.Latency.Max() != 3*time.Millisecond {
		t.Errorf("known flags or latency wrong: %+v", s)
	}
}

// TestRunDrainsBeforeReading: Probe.Drain runs once, after the last
// operation of the measured phase and before Run returns; its error is
// Run's.
func TestRunDrainsBeforeReading(t *testing.T) {
	t.Parallel()
	var calls, drained, callsAtDrain atomic.Int64
	load := Load{Concurrency: 2, Keys: 1, Duration: time.Minute, MaxOps: 100}
	op := func() Op {
		return func(context.Context, int) (bool, error) { calls.Add(1); return true, nil }
	}
	probe := Probe{Drain: func(context.Context) error {
		drained.Add(1)
		callsAtDrain.Store(calls.Load())
		return nil
	}}
	if _, err := Run(context.Background(), load, op, probe); err != nil {
		t.Fatal(err)
	}
	if drained.Load() != 1 || callsAtDrain.Load() != 100 {
		t.Fatalf("drained %d times after %d calls, want once after all 100", drained.Load(), callsAtDrain.Load())
	}
	errDrain := errors.New("drain failed")
	probe.Drain = func(context.Context) error { return errDrain }
	if _, err := Run(context.Background(), load, op, probe); !errors.Is(err, errDrain) {
		t.Fatalf("Run err %v, want the drain's error", err)
	}
}

// TestRunSettlesAfterWarmup: Probe.Settle runs once, after the warm-up's
// last operation and before the measured phase's first; its error is
// Run's. Both phases end at their budget of 100 operations (their
// durations are a minute), so the counts are exact.
func TestRunSettlesAfterWarmup(t *testing.T) {
	t.Parallel()
	var calls, settled, callsAtSettle atomic.Int64
	load := Load{Concurrency: 2, Keys: 1, Warmup: time.Minute, Duration: time.Minute, MaxOps: 100}
	op := func() Op {
		return func(context.Context, int) (bool, error) { calls.Add(1); return true, nil }
	}
	probe := Probe{Settle: func(context.Context) error {
		settled.Add(1)
		callsAtSettle.Store(calls.Load())
		return nil
	}}
	s, err := Run(context.Background(), load, op, probe)
	if err != nil {
		t.Fatal(err)
	}
	if settled.Load() != 1 || callsAtSettle.Load() != 100 || s.Ops != 100 || calls.Load() != 200 {
		t.Fatalf("settled %d times after %d calls; %d calls in all, %d measured: want once, after the 100 warm-up calls and before any of the 100 measured ones",
			settled.Load(), callsAtSettle.Load(), calls.Load(), s.Ops)
	}
	errSettle := errors.New("settle failed")
	probe.Settle = func(context.Context) error { return errSettle }
	if _, err := Run(context.Background(), load, op, probe); !errors.Is(err, errSettle) {
		t.Fatalf("Run err %v, want the settle's error", err)
	}
}
