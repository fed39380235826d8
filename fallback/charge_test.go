package fallback_test

import (
	"context"
	"errors"
	"log/slog"
	"math"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/fallback"
	"github.com/floodgate-go/floodgate/quota"
	"github.com/floodgate-go/floodgate/testing/clock"
	"github.com/floodgate-go/floodgate/testing/redistest"
	"github.com/floodgate-go/floodgate/tiers/localfirst"
	"github.com/floodgate-go/floodgate/tiers/redisstore"
)

var errLostReply = errors.New("stalling: the reply was lost")

// stalling is a ledger (a quota.Reporter) that stalls on command: its
// takes run out of their budget (a paused or busy Redis), and its report
// calls can lose their reply, after being applied or before.
type stalling struct {
	inner quota.Reporter
	stall atomic.Bool
	// loseAfter: the next report is applied, its reply lost.
	loseAfter atomic.Bool
	// loseBefore: the next report never arrives.
	loseBefore atomic.Bool
}

func (s *stalling) Take(ctx context.Context, b []quota.Bucket, r []quota.Result) (bool, error) {
	if s.stall.Load() {
		return false, context.DeadlineExceeded
	}
	return s.inner.Take(ctx, b, r)
}

func (s *stalling) Report(ctx context.Context, instance, seq uint64, b []quota.Bucket, r []quota.ReportResult) error {
	if s.loseBefore.Swap(false) {
		return errLostReply
	}
	if err := s.inner.Report(ctx, instance, seq, b, r); err != nil {
		return err
	}
	if s.loseAfter.Swap(false) {
		clear(r[:len(b)])
		return errLostReply
	}
	return nil
}

func (s *stalling) Resolve(ctx context.Context, instance, seq uint64, b []quota.Bucket, r []quota.ReportResult) error {
	return s.inner.Resolve(ctx, instance, seq, b, r)
}

func (s *stalling) Unwrap() quota.Store { return s.inner }

// remaining reads what the store's bucket holds, charging nothing.
func remaining(t *testing.T, st quota.Store, b quota.Bucket) int64 {
	t.Helper()
	b.Cost = 0
	res := make([]quota.Result, 1)
	if _, err := st.Take(context.Background(), []quota.Bucket{b}, res); err != nil {
		t.Fatalf("read %s: %v", b.Key, err)
	}
	return res[0].Remaining
}

// TestLocalAdmitsAreCharged: units admitted locally while the store
// stalls are charged to it once it answers, exactly once, through the
// recorded report path: a report whose reply was lost after it was
// applied is resolved, not sent again; one lost before it arrived is sent
// again. The bucket holds 100 units and refills 1 an hour, on a fake
// clock that does not move, so what Redis holds is exactly 100 minus
// what was charged. The stall is the ledger's, failing takes at once;
// the call budget is one no healthy call to Redis comes near on a loaded
// machine (healthyBudget), so that only the stall decides locally.
func TestLocalAdmitsAreCharged(t *testing.T) {
	t.Parallel()
	clk := clock.New(time.Unix(1_700_000_000, 0))
	srv := redistest.Start(t)
	rs, err := redisstore.New(srv.Client(), redisstore.WithClock(clk))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = rs.Close() })
	led := &stalling{inner: rs}
	s, err := fallback.New(led, fallback.WithClock(clk), fallback.WithManualSync(), fallback.WithTimeout(healthyBudget),
		fallback.WithInstances(func() int { return 2 }), fallback.WithLogger(slog.New(slog.NewTextHandler(testWriter{t}, nil))))
	if err != nil {
		t.Fatal(err)
	}
	if !s.ChargesLocal() {
		t.Fatal("ChargesLocal is false over a redis store")
	}
	ctx := context.Background()
	for _, c := range []struct {
		key  string
		lose *atomic.Bool
	}{{"charge:after", &led.loseAfter}, {"charge:before", &led.loseBefore}} {
		t.Run(c.key, func(t *testing.T) {
			b := tokenBucket(c.key, 1, 100, time.Hour, quota.FailLocal)
			for i := range 10 {
				if ok, res := take(t, s, b); !ok || res[0].Source.Degraded() {
					t.Fatalf("store take %d: %v %+v", i, ok, res[0])
				}
			}
			// The stall: 90 left, 2 instances, so this one's share is 45.
			led.stall.Store(true)
			n := 0
			for ; n < 200; n++ {
				ok, res := take(t, s, b)
				if !ok {
					break
				}
				if res[0].Source != floodgate.SourceLocalFallback {
					t.Fatalf("take %d decided by %s", n, res[0].Source)
				}
			}
			if n != 45 {
				t.Fatalf("admitted %d locally, want 45 (90 left / 2 instances)", n)
			}
			led.stall.Store(false)
			if got := remaining(t, rs, b); got != 90 {
				t.Fatalf("Redis holds %d before the report, want 90", got)
			}
			c.lose.Store(true)
			if err := s.Sync(ctx); err == nil {
				t.Fatal("Sync with a lost reply returned nil")
			}
			for range 2 { // the lost call is resolved, then nothing is left
				if err := s.Sync(ctx); err != nil {
					t.Fatalf("Sync: %v", err)
				}
			}
			if got, want := remaining(t, rs, b), int64(90-n); got != want {
				t.Fatalf("Redis holds %d after the stall, want %d: charged %d for %d admitted locally", got, want, 90-got, n)
			}
			if st := s.Stats(); st.Owed != 0 {
				t.Fatalf("still owed %d units", st.Owed)
			}
		})
	}
	st := s.Stats()
	if st.Charged != 90 || st.ReportFailures != 2 || st.Debt != 0 {
		t.Fatalf("Stats: charged %d, report failures %d, debt %d; want 90, 2, 0", st.Charged, st.ReportFailures, st.Debt)
	}
}

// TestStallBound holds the over-admission bound of the package doc on a
// fake clock: n instances over one store, then a slow period of length T
// in which every instance is asked for more than it can give every
// millisecond. The fleet admits at most
//
//	Σ_i min(C, R_i + r·a_i) ÷ n + r·T
//
// (R_i what instance i last heard, a_i how long before the period), and
// so at most n·s + r·T with s = C/n its share. In "stale" each instance
// was told a different state (the later ones drained what the earlier
// ones still count); in "fresh" every instance heard the same 2 units
// left, 4 instances, a rate of 1 an hour: the bound is 2 (rounding each
// share up to a whole unit admitted 4). Then the store answers, every
// instance reports, and the store's bucket has been charged for every
// unit admitted locally, up to s per instance.
func TestStallBound(t *testing.T) {
	t.Parallel()
	t.Run("stale", func(t *testing.T) { stallBound(t, 40, 20, time.Second, true) })
	t.Run("fresh", func(t *testing.T) { stallBound(t, 40, 1, time.Hour, false) })
}

func stallBound(t *testing.T, C, rate int64, period time.Duration, stale bool) {
	const (
		n     = 4
		slowT = 300 * time.Millisecond
	)
	clk := clock.New(time.Unix(1_700_000_000, 0))
	mem := newMemStore(t, clk).(quota.Reporter)
	b := tokenBucket("stall:key", rate, C, period, quota.FailLocal)
	r := float64(rate) / period.Seconds()
	type inst struct {
		led *stalling
		s   *fallback.Store
		rem int64
		at  time.Time
	}
	var is [n]*inst
	for i := range is {
		led := &stalling{inner: mem}
		s, err := fallback.New(led, fallback.WithClock(clk), fallback.WithManualSync(),
			fallback.WithInstances(func() int { return n }), fallback.WithLogger(slog.New(slog.DiscardHandler)))
		if err != nil {
			t.Fatal(err)
		}
		is[i] = &inst{led: led, s: s}
	}
	if stale {
		// Instance 0 hears of a full bucket; then the others drain it,
		// 2 ms apart, so every view but the last is stale.
		for i, in := range is {
			for {
				ok, res := take(t, in.s, b)
				in.rem, in.at = res[0].Remaining, clk.Now()
				if !ok || i == 0 {
					break
				}
			}
			clk.Advance(2 * time.Millisecond)
		}
	} else {
		for range C - 2 {
			if ok, _ := take(t, is[0].s, b); !ok {
				t.Fatal("store denied")
			}
		}
		for _, in := range is {
			z := b
			z.Cost = 0
			_, res := take(t, in.s, z)
			in.rem, in.at = res[0].Remaining, clk.Now()
		}
	}
	t0 := clk.Now()
	bound := r * slowT.Seconds()
	for _, in := range is {
		bound += math.Min(float64(C), float64(in.rem)+r*t0.Sub(in.at).Seconds()) / n
		in.led.stall.Store(true)
	}
	admitted := [n]int64{}
	var total int64
	for step := time.Duration(0); step <= slowT; step += time.Millisecond {
		for i, in := range is {
			for range C {
				ok, res := take(t, in.s, b)
				if !ok {
					break
				}
				if res[0].Source != floodgate.SourceLocalFallback {
					t.Fatalf("decided by %s during the stall", res[0].Source)
				}
				admitted[i]++
				total++
			}
		}
		if step < slowT {
			clk.Advance(time.Millisecond)
		}
	}
	if float64(total) > bound+1e-9 {
		t.Fatalf("the fleet admitted %d locally in %s, over the bound %.3f (admitted per instance %v)", total, slowT, bound, admitted)
	}
	if share := float64(C) / n; float64(total) > n*share+r*slowT.Seconds() {
		t.Fatalf("admitted %d, over n·s + r·T = %.1f", total, n*share+r*slowT.Seconds())
	}
	t.Logf("admitted %d locally (per instance %v), bound %.3f", total, admitted, bound)
	// The store answers; each instance charges what it admitted, up to
	// its share.
	before := remaining(t, mem, b)
	var want int64
	for i, in := range is {
		in.led.stall.Store(false)
		if err := in.s.Sync(context.Background()); err != nil {
			t.Fatal(err)
		}
		want += min(admitted[i], C/n)
	}
	// A report charges at most what the bucket holds; the rest is debt.
	var charged, debt uint64
	for _, in := range is {
		st := in.s.Stats()
		charged += st.Charged
		debt += st.Debt
	}
	if int64(charged+debt) != want {
		t.Fatalf("reported %d (charged %d, debt %d), want %d", charged+debt, charged, debt, want)
	}
	if got := remaining(t, mem, b); got != before-int64(charged) {
		t.Fatalf("store holds %d, want %d - %d", got, before, charged)
	}
}

// gated is a ledger whose takes wait for a gate (a paused Redis: the
// command is sent, and runs when the server resumes), unless their
// context ends first. It does not unwrap to the in-process store it
// wraps, which is never late: it stands for a remote one.
type gated struct {
	quota.Reporter
	mu   sync.Mutex
	gate chan struct{}
}

func (g *gated) close() {
	g.mu.Lock()
	g.gate = make(chan struct{})
	g.mu.Unlock()
}

func (g *gated) open() {
	g.mu.Lock()
	close(g.gate)
	g.gate = nil
	g.mu.Unlock()
}

func (g *gated) Take(ctx context.Context, b []quota.Bucket, r []quota.Result) (bool, error) {
	g.mu.Lock()
	gate := g.gate
	g.mu.Unlock()
	if gate != nil {
		select {
		case <-gate:
		case <-ctx.Done():
			return false, ctx.Err()
		}
	}
	return g.Reporter.Take(ctx, b, r)
}

// TestLateAnswerIsReconciled: a take that outlives its budget is decided
// locally, and the store applies it later (a paused Redis runs what was
// sent when it resumes). The store must end charged once for what was
// admitted: a local admit the store also allowed is not reported again;
// a take denied locally that the store allowed later is given back; and
// a take denied locally waits (up to the closed budget) for the store's
// answer, which then decides it. The gate, not a clock, decides what the
// store answers when: a take's budget (5ms) runs out while the gate is
// shut, a denied take's closed budget (100ms) too before the gate opens,
// and the take that waits for the answer has a closed budget no loaded
// machine comes near (healthyBudget) while the gate opens once its call
// has run out of its budget. The background call itself runs for the
// slow grace, an hour.
func TestLateAnswerIsReconciled(t *testing.T) {
	t.Parallel()
	clk := clock.New(time.Unix(1_700_000_000, 0))
	mem := newMemStore(t, clk).(quota.Reporter)
	g := &gated{Reporter: mem}
	newStore := func(closed time.Duration) *fallback.Store {
		s, err := fallback.New(g, fallback.WithClock(clk), fallback.WithManualSync(), fallback.WithSlowGrace(time.Hour),
			fallback.WithTimeout(5*time.Millisecond), fallback.WithClosedTimeout(closed),
			fallback.WithInstances(func() int { return 4 }), fallback.WithLogger(slog.New(slog.DiscardHandler)))
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	s := newStore(100 * time.Millisecond)
	ctx := context.Background()
	waitLate := func(n uint64) {
		t.Helper()
		if !waitFor(lateWait, func() bool { return s.Stats().Late >= n }) {
			t.Fatalf("the late answer was not reconciled: %+v", s.Stats())
		}
	}

	// Admitted locally, allowed by the store later: charged once.
	a := tokenBucket("late:admit", 1, 40, time.Hour, quota.FailLocal)
	g.close()
	ok, res := take(t, s, a)
	if !ok || res[0].Source != floodgate.SourceLocalFallback {
		t.Fatalf("take: %v %+v, want admitted locally", ok, res[0])
	}
	g.open()
	waitLate(1)
	if err := s.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	if got := remaining(t, mem, a); got != 39 {
		t.Fatalf("store holds %d, want 39: the unit admitted locally and applied late must be charged once", got)
	}

	// Denied locally (a cost of 15 is above the local burst of 40 / 4),
	// allowed by the store after the closed budget: given back.
	b := tokenBucket("late:deny", 1, 40, time.Hour, quota.FailLocal)
	b.Cost = 15
	g.close()
	if ok, res := take(t, s, b); ok || res[0].Source != floodgate.SourceLocalFallback {
		t.Fatalf("take: %v %+v, want denied locally", ok, res[0])
	}
	g.open()
	waitLate(2)
	if err := s.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	if got := remaining(t, mem, b); got != 40 {
		t.Fatalf("store holds %d, want 40: a take denied locally must not stay charged", got)
	}
	st := s.Stats()
	if st.LateAnswered != 0 || st.LateApplied != 2 || st.GivenBack != 15 || st.Charged != 0 || st.Owed != 0 {
		t.Fatalf("Stats: late answered %d, applied %d, given back %d, charged %d, owed %d; want 0, 2, 15, 0, 0",
			st.LateAnswered, st.LateApplied, st.GivenBack, st.Charged, st.Owed)
	}

	// Denied locally, the store answers within the closed budget: its
	// answer decides. The gate opens once the call has run out of its
	// budget (counted slow), so the answer always comes while the take
	// waits for it, however late a loaded host fires the budget's timer
	// or runs the goroutine that opens the gate.
	w := newStore(healthyBudget)
	g.close()
	go func() {
		waitFor(lateWait, func() bool { return w.Stats().Slow > 0 })
		g.open()
	}()
	ok, res = take(t, w, b)
	if !ok || res[0].Source.Degraded() {
		t.Fatalf("take: %v %+v, want the store's admit", ok, res[0])
	}
	if got := remaining(t, mem, b); got != 25 {
		t.Fatalf("store holds %d, want 25", got)
	}
	st = w.Stats()
	if st.LateAnswered != 1 || st.LateApplied != 0 || st.GivenBack != 0 || st.Charged != 0 || st.Owed != 0 {
		t.Fatalf("Stats: late answered %d, applied %d, given back %d, charged %d, owed %d; want 1, 0, 0, 0, 0",
			st.LateAnswered, st.LateApplied, st.GivenBack, st.Charged, st.Owed)
	}
}

// TestSilentStoreIsNotAwaited: a take denied locally waits for the late
// answer only while the primary has answered within the closed budget; a
// primary silent for longer (a paused Redis) is stalled, and the take is
// decided locally at once, its answer reconciled when it comes. The gate
// opens once the call has run out of its budget, as in
// TestLateAnswerIsReconciled, where the same take, with the primary heard
// from just now, gets the store's admit: here it is denied.
func TestSilentStoreIsNotAwaited(t *testing.T) {
	t.Parallel()
	clk := clock.New(time.Unix(1_700_000_000, 0))
	mem := newMemStore(t, clk).(quota.Reporter)
	g := &gated{Reporter: mem}
	s, err := fallback.New(g, fallback.WithClock(clk), fallback.WithManualSync(), fallback.WithSlowGrace(time.Hour),
		fallback.WithTimeout(5*time.Millisecond), fallback.WithClosedTimeout(healthyBudget),
		fallback.WithInstances(func() int { return 4 }), fallback.WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		t.Fatal(err)
	}
	b := tokenBucket("late:silent", 1, 40, time.Hour, quota.FailLocal)
	b.Cost = 15                                   // above the local burst of 40 / 4: denied locally
	clk.Advance(healthyBudget + time.Millisecond) // nothing answered since New
	g.close()
	go func() {
		waitFor(lateWait, func() bool { return s.Stats().Slow > 0 })
		g.open()
	}()
	ok, res := take(t, s, b)
	if ok || res[0].Source != floodgate.SourceLocalFallback {
		t.Fatalf("take: %v %+v, want denied locally without waiting for a silent store", ok, res[0])
	}
	if !waitFor(lateWait, func() bool { return s.Stats().Late >= 1 }) {
		t.Fatalf("the late answer was not reconciled: %+v", s.Stats())
	}
	if err := s.Sync(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := remaining(t, mem, b); got != 40 {
		t.Fatalf("store holds %d, want 40: the take denied locally must not stay charged", got)
	}
	if st := s.Stats(); st.LateAnswered != 0 || st.GivenBack != 15 {
		t.Fatalf("Stats: late answered %d, given back %d; want 0, 15", st.LateAnswered, st.GivenBack)
	}
}

// TestNoReporterWarns: over a primary that takes no report calls, New
// says at construction that local admits will not be charged, and the
// Store still decides.
func TestNoReporterWarns(t *testing.T) {
	t.Parallel()
	logs := &logBuffer{}
	s, err := fallback.New(downStore{}, fallback.WithLogger(slog.New(slog.NewTextHandler(logs, nil))))
	if err != nil {
		t.Fatal(err)
	}
	if s.ChargesLocal() {
		t.Fatal("ChargesLocal is true over a store that takes no report calls")
	}
	if !strings.Contains(logs.String(), "takes no report calls") {
		t.Fatalf("no warning at construction; logs: %s", logs.String())
	}
	if err := s.Sync(context.Background()); err != nil {
		t.Fatalf("Sync: %v", err)
	}
	if ok, res := take(t, s, tokenBucket("k", 1, 10, time.Second, quota.FailLocal)); !ok || res[0].Source != floodgate.SourceLocalFallback {
		t.Fatalf("take: %v %+v, want admitted locally", ok, res[0])
	}
}

// TestLeaseDecidedLocallyChargesTheRequestOnly: a leased key's request that
// asks the store for a lease while the store stalls is decided by the
// fallback on its local share, cost and extra units together; no lease is
// granted, so the extra units are given back and only the request's cost
// is charged to the store when it answers.
func TestLeaseDecidedLocallyChargesTheRequestOnly(t *testing.T) {
	t.Parallel()
	clk := clock.New(time.Unix(1_700_000_000, 0))
	mem := newMemStore(t, clk).(quota.Reporter)
	led := &stalling{inner: mem}
	fb, err := fallback.New(led, fallback.WithClock(clk), fallback.WithManualSync(), fallback.WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		t.Fatal(err)
	}
	lf, err := localfirst.New(fb, mem, localfirst.WithClock(clk))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = lf.Close(context.Background()) })
	b := tokenBucket("lease:key", 1, 100, time.Hour, quota.FailLocal)
	b.Consistency = quota.Leased
	if ok, res := take(t, lf, b); !ok || res[0].Source.Degraded() {
		t.Fatalf("first take: %v %+v", ok, res[0])
	}
	clk.Advance(10 * time.Millisecond)
	led.stall.Store(true)
	ok, res := take(t, lf, b)
	if !ok || res[0].Source != floodgate.SourceLocalFallback {
		t.Fatalf("second take: %v %+v, want admitted by the fallback", ok, res[0])
	}
	if st := fb.Stats(); st.Owed != 1 {
		t.Fatalf("the fallback owes %d units for one request of cost 1", st.Owed)
	}
	led.stall.Store(false)
	if err := fb.Sync(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := remaining(t, mem, b); got != 98 {
		t.Fatalf("store holds %d, want 98 (two requests of cost 1)", got)
	}
}
