package storetest

import (
	"context"
	"crypto/rand"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/quota"
	"github.com/floodgate-go/floodgate/testing/clock"
)

// Factory returns a fresh Store that reads time from clk. It may register
// cleanups on t.
type Factory func(t *testing.T, clk *clock.Fake) quota.Store

// Run runs the whole conformance suite against the stores newStore makes.
func Run(t *testing.T, newStore Factory) {
	run := newPrefix()
	fresh := func(t *testing.T) (quota.Store, *clock.Fake, string) {
		clk := clock.New(time.Time{})
		st := newStore(t, clk)
		if st == nil {
			t.Fatal("factory returned a nil Store")
		}
		return st, clk, run + t.Name() + ":"
	}
	t.Run("Vectors", func(t *testing.T) {
		for _, v := range Vectors {
			t.Run(v.Name, func(t *testing.T) {
				st, clk, prefix := fresh(t)
				Check(t, st, clk, v, prefix)
			})
			if multiBucket(v) {
				t.Run(v.Name+"/same_hash_tag", func(t *testing.T) {
					st, clk, prefix := fresh(t)
					Check(t, st, clk, v, "{"+prefix+"}:")
				})
			}
		}
	})
	t.Run("TokenBucketOnePer100ms", func(t *testing.T) {
		st, clk, prefix := fresh(t)
		tokenBucketTrace(t, st, clk, prefix)
	})
	t.Run("SlidingWindowLogNeverExceeds", func(t *testing.T) {
		st, clk, prefix := fresh(t)
		slidingLogTrace(t, st, clk, prefix)
	})
	t.Run("GCRAMatchesTAT", func(t *testing.T) {
		st, clk, prefix := fresh(t)
		gcraTrace(t, st, clk, prefix)
	})
	t.Run("Properties", func(t *testing.T) {
		runProperties(t, fresh)
	})
	for _, group := range []struct {
		name string
		vs   []Vector
	}{{"Partial", PartialVectors}, {"Calendar", CalendarVectors}} {
		t.Run(group.name, func(t *testing.T) {
			for _, v := range group.vs {
				t.Run(v.Name, func(t *testing.T) {
					st, clk, prefix := fresh(t)
					Check(t, st, clk, v, prefix)
				})
				if multiBucket(v) {
					t.Run(v.Name+"/same_hash_tag", func(t *testing.T) {
						st, clk, prefix := fresh(t)
						Check(t, st, clk, v, "{"+prefix+"}:")
					})
				}
			}
		})
	}
	t.Run("ConcurrentExactCapacity", func(t *testing.T) {
		for _, l := range concurrencyLimits {
			t.Run(l.Algorithm.String(), func(t *testing.T) {
				st, clk, prefix := fresh(t)
				concurrentOneBucket(t, st, clk, prefix, l)
			})
		}
	})
	t.Run("ConcurrentAllOrNothing", func(t *testing.T) {
		st, clk, prefix := fresh(t)
		concurrentHierarchy(t, st, clk, prefix)
	})
	t.Run("ConcurrentOppositeOrder", func(t *testing.T) {
		st, clk, prefix := fresh(t)
		concurrentOppositeOrder(t, st, clk, prefix)
	})
	t.Run("BadInput", func(t *testing.T) {
		st, _, prefix := fresh(t)
		badInput(t, st, prefix)
	})
	t.Run("Wait", func(t *testing.T) {
		for _, v := range WaitVectors {
			t.Run(v.Name, func(t *testing.T) {
				st, clk, prefix := fresh(t)
				if _, ok := st.(quota.Settler); !ok {
					v = untilSettle(v)
				}
				Check(t, st, clk, v, prefix)
			})
			if multiBucket(v) {
				t.Run(v.Name+"/same_hash_tag", func(t *testing.T) {
					st, clk, prefix := fresh(t)
					Check(t, st, clk, v, "{"+prefix+"}:")
				})
			}
		}
	})
	t.Run("Settle", func(t *testing.T) {
		st, _, _ := fresh(t)
		if _, ok := st.(quota.Settler); !ok {
			t.Skipf("%T is not a quota.Settler", st)
		}
		for _, v := range SettleVectors {
			t.Run(v.Name, func(t *testing.T) {
				st, clk, prefix := fresh(t)
				Check(t, st, clk, v, prefix)
			})
			if multiBucket(v) {
				t.Run(v.Name+"/same_hash_tag", func(t *testing.T) {
					st, clk, prefix := fresh(t)
					Check(t, st, clk, v, "{"+prefix+"}:")
				})
			}
		}
		t.Run("BadInput", func(t *testing.T) {
			st, _, prefix := fresh(t)
			settleBadInput(t, st.(quota.Settler), prefix)
		})
	})
	t.Run("Report", func(t *testing.T) {
		st, _, _ := fresh(t)
		if _, ok := st.(quota.Reporter); !ok {
			t.Skipf("%T is not a quota.Reporter", st)
		}
		for _, l := range []quota.Limit{
			{Algorithm: quota.TokenBucket, Rate: 10, Period: time.Second, Burst: 10},
			{Algorithm: quota.GCRA, Rate: 10, Period: time.Second, Burst: 10},
		} {
			t.Run(l.Algorithm.String(), func(t *testing.T) {
				st, clk, prefix := fresh(t)
				reportTrace(t, st.(quota.Reporter), clk, prefix+"{r}", l)
			})
		}
		for _, w := range windowReports {
			t.Run(w.limit.Algorithm.String(), func(t *testing.T) {
				st, clk, prefix := fresh(t)
				reportWindowTrace(t, st.(quota.Reporter), clk, prefix+"{r}", w.limit)
			})
		}
		t.Run("fixed_window_calendar", func(t *testing.T) {
			st, clk, prefix := fresh(t)
			reportCalendarTrace(t, st.(quota.Reporter), clk, prefix+"{r}")
		})
		t.Run("ManyAlgorithms", func(t *testing.T) {
			st, clk, prefix := fresh(t)
			reportWindowMany(t, st.(quota.Reporter), clk, prefix)
		})
		t.Run("Many", func(t *testing.T) {
			st, _, prefix := fresh(t)
			reportMany(t, st.(quota.Reporter), prefix, quota.Limit{Algorithm: quota.TokenBucket, Rate: 10, Period: time.Second, Burst: 10})
		})
		t.Run("BadInput", func(t *testing.T) {
			st, _, prefix := fresh(t)
			reportBadInput(t, st.(quota.Reporter), prefix)
		})
	})
}

// newPrefix returns a key prefix unique to this process and call.
func newPrefix() string {
	return "fgst:" + rand.Text()[:12] + ":"
}

func multiBucket(v Vector) bool {
	for _, step := range v.Steps {
		if len(step.Charges) > 1 {
			return true
		}
	}
	return false
}

// reporter is the part of *testing.T the checks use, so this package's own
// tests can run them against broken stores and see them fail.
type reporter interface {
	Helper()
	Errorf(format string, args ...any)
	Fatalf(format string, args ...any)
}

// Check runs one Vector against st, moving clk to clock.Epoch + step.At
// before each step, and reports every difference from the vector.
func Check(t *testing.T, st quota.Store, clk *clock.Fake, v Vector, prefix string) {
	t.Helper()
	check(t, st, clk, v, prefix)
}

func check(t reporter, st quota.Store, clk *clock.Fake, v Vector, prefix string) {
	t.Helper()
	ctx := context.Background()
	for i, step := range v.Steps {
		clk.Set(clock.Epoch.Add(step.At))
		bs := make([]quota.Bucket, len(step.Charges))
		for j, c := range step.Charges {
			bs[j] = quota.Bucket{Key: prefix + c.Key, Limit: c.Limit, Cost: c.Cost, MaxWait: c.MaxWait, AtMost: c.AtMost, Span: c.Span}
		}
		if step.Settle {
			se, ok := st.(quota.Settler)
			if !ok {
				t.Fatalf("step %d (at %v): %T is not a quota.Settler", i, step.At, st)
			}
			if err := se.Settle(ctx, bs, nil); err != nil {
				t.Fatalf("step %d (at %v): Settle: %v", i, step.At, err)
			}
			continue
		}
		res := make([]quota.Result, len(bs))
		allowed, err := st.Take(ctx, bs, res)
		if err != nil {
			t.Fatalf("step %d (at %v): Take: %v", i, step.At, err)
		}
		if allowed != step.Allowed {
			t.Errorf("step %d (at %v): Take allowed = %v, want %v", i, step.At, allowed, step.Allowed)
		}
		for j, c := range step.Charges {
			w := step.Want[j]
			got := res[j]
			want := quota.Result{Allowed: w.Allowed, Limit: c.Limit.Capacity(), Remaining: w.Remaining, Reset: w.Reset, RetryAfter: w.RetryAfter, Wait: w.Wait, Granted: w.Granted}
			got = normSource(got)
			if got != want {
				t.Errorf("step %d (at %v) bucket %q cost %d:\n got  %s\n want %s", i, step.At, c.Key, c.Cost, fmtResult(got), fmtResult(want))
			}
		}
	}
}

// normSource maps SourceStore to the zero Source, which means the same;
// any other Source is left to fail the comparison.
func normSource(r quota.Result) quota.Result {
	if r.Source == floodgate.SourceStore {
		r.Source = ""
	}
	return r
}

func fmtResult(r quota.Result) string {
	return fmt.Sprintf("allowed=%v limit=%d remaining=%d reset=%v retry_after=%v wait=%v granted=%d source=%q", r.Allowed, r.Limit, r.Remaining, r.Reset, r.RetryAfter, r.Wait, r.Granted, r.Source)
}

// untilSettle returns v up to its first Settle step: what a Store that is
// not a quota.Settler can be checked on.
func untilSettle(v Vector) Vector {
	for i, step := range v.Steps {
		if step.Settle {
			v.Steps = v.Steps[:i]
			break
		}
	}
	return v
}

// take1 takes cost from one bucket and fails the test on error.
func take1(t reporter, st quota.Store, key string, l quota.Limit, cost int64) quota.Result {
	t.Helper()
	var res [1]quota.Result
	ok, err := st.Take(context.Background(), []quota.Bucket{{Key: key, Limit: l, Cost: cost}}, res[:])
	if err != nil {
		t.Fatalf("Take(%q, cost %d): %v", key, cost, err)
	}
	if ok != res[0].Allowed {
		t.Fatalf("Take(%q) returned allowed=%v but its only result says %v", key, ok, res[0].Allowed)
	}
	return res[0]
}

// tokenBucketTrace: 10/s burst 20 allows exactly 20 at t0, then exactly one
// per 100 ms, at the 100 ms marks. Attempts come every 10 ms for 2 s.
// Derivation: after a charge at ts leaves 0 tokens, an attempt at ts+d
// (deny saves nothing) sees tokens = (d*10)/1e6, which reaches 1 first at
// d = 100000 exactly; so the only admissions are at k*100 ms, one each
// (the second attempt at the same instant sees 0 tokens).
func tokenBucketTrace(t *testing.T, st quota.Store, clk *clock.Fake, prefix string) {
	key := prefix + "tb"
	allowed := 0
	for range 30 {
		if take1(t, st, key, tb10x20, 1).Allowed {
			allowed++
		}
	}
	if allowed != 20 {
		t.Fatalf("at t0: %d of 30 allowed, want exactly 20", allowed)
	}
	var at []time.Duration
	for tick := 1; tick <= 200; tick++ {
		d := time.Duration(tick) * 10 * time.Millisecond
		clk.Set(clock.Epoch.Add(d))
		for range 2 {
			if take1(t, st, key, tb10x20, 1).Allowed {
				at = append(at, d)
			}
		}
	}
	if len(at) != 20 {
		t.Fatalf("over 2 s after the burst: %d allowed (at %v), want exactly 20", len(at), at)
	}
	for i, d := range at {
		if want := time.Duration(i+1) * 100 * time.Millisecond; d != want {
			t.Fatalf("admission %d at %v, want %v (all: %v)", i, d, want, at)
		}
	}
}

// lcg is a tiny deterministic generator, so traces are the same on every
// run and every store.
type lcg uint64

func (g *lcg) next(n int64) int64 {
	*g = *g*6364136223846793005 + 1442695040888963407
	return int64(uint64(*g)>>33) % n
}

// slidingLogTrace scans a trace of 300 takes on a sliding window log 5 per
// second: no window of one second ever holds more than 5 admitted units,
// and each decision is exactly the definition's (admit iff the units
// admitted in (now-W, now] plus the cost fit in L).
func slidingLogTrace(t *testing.T, st quota.Store, clk *clock.Fake, prefix string) {
	const L, W = 5, int64(time.Second / time.Microsecond)
	l := quota.Limit{Algorithm: quota.SlidingWindowLog, Rate: L, Period: time.Second}
	key := prefix + "swl"
	type unit struct{ at, n int64 }
	var admitted []unit
	inWindow := func(now int64) int64 {
		var sum int64
		for _, u := range admitted {
			if u.at > now-W && u.at <= now {
				sum += u.n
			}
		}
		return sum
	}
	g := lcg(1)
	now := int64(0)
	allowed, denied := 0, 0
	for i := range 300 {
		now += g.next(120_000) // 0..120 ms apart
		cost := 1 + g.next(2)
		clk.Set(clock.Epoch.Add(time.Duration(now) * time.Microsecond))
		r := take1(t, st, key, l, cost)
		want := inWindow(now)+cost <= L
		if r.Allowed != want {
			t.Fatalf("take %d at +%dµs cost %d: allowed=%v, the definition says %v", i, now, cost, r.Allowed, want)
		}
		if r.Allowed {
			allowed++
			admitted = append(admitted, unit{now, cost})
			if got := inWindow(now); got > L {
				t.Fatalf("take %d at +%dµs: %d units admitted in the window ending now, limit %d", i, now, got, L)
			}
			if r.Remaining != L-inWindow(now) {
				t.Fatalf("take %d: remaining %d, want %d", i, r.Remaining, L-inWindow(now))
			}
		} else {
			denied++
		}
	}
	// Every window (t-W, t] with t at an admission or a window end holds at
	// most L: the maxima of a step function that only rises at admissions.
	for _, u := range admitted {
		if got := inWindow(u.at); got > L {
			t.Fatalf("window ending at +%dµs holds %d > %d", u.at, got, L)
		}
	}
	if allowed < 50 || denied < 50 {
		t.Fatalf("trace is not exercising the limit: %d allowed, %d denied", allowed, denied)
	}
}

// gcraTrace: 300 takes at pseudo-random times with costs 1..3 on GCRA 8/s
// burst 3 (T = 125000 µs, an integer, so the definition can be computed in
// integers): tat' = max(tat, now) + c*T; allow iff tat' - now <= B*T; the
// allowed store tat'; retry_after = tat' - B*T - now; remaining =
// floor((B*T - (tat - now))/T) on the TAT the take leaves. Here now is
// µs since clock.Epoch, which is quota.GCRAEpoch. With every quantity whole,
// quota.GCRASlack (0.5) changes nothing: x <= B*T + 0.5 iff x <= B*T,
// ceil(x - 0.5) = x, and floor((m + 0.5)/T) = floor(m/T) for whole x, m >= 0.
func gcraTrace(t *testing.T, st quota.Store, clk *clock.Fake, prefix string) {
	const N, B, T = 8, 3, int64(125_000)
	l := quota.Limit{Algorithm: quota.GCRA, Rate: N, Period: time.Second, Burst: B}
	key := prefix + "gcra"
	g := lcg(7)
	now := int64(0)
	tat := int64(0) // t0: a new bucket has tat = now, and max(tat, now) = now
	allowed, denied := 0, 0
	for i := range 300 {
		now += g.next(200_000)
		cost := 1 + g.next(3)
		clk.Set(clock.Epoch.Add(time.Duration(now) * time.Microsecond))
		r := take1(t, st, key, l, cost)
		tat0 := max(tat, now)
		tat1 := tat0 + cost*T
		ok := tat1-now <= B*T
		want := quota.Result{Allowed: ok, Limit: B}
		left := tat0
		if ok {
			left = tat1
			tat = tat1
			allowed++
		} else {
			want.RetryAfter = time.Duration(tat1-B*T-now) * time.Microsecond
			denied++
		}
		want.Remaining = max(0, (B*T-(left-now))/T) // non-negative operands: / is floor
		want.Reset = time.Duration(left-now) * time.Microsecond
		r = normSource(r)
		if r != want {
			t.Fatalf("take %d at +%dµs cost %d:\n got  %s\n want %s", i, now, cost, fmtResult(r), fmtResult(want))
		}
	}
	if allowed < 50 || denied < 50 {
		t.Fatalf("trace is not exercising the limit: %d allowed, %d denied", allowed, denied)
	}
}

// concurrencyLimits have capacity 100 each and no refill at a frozen clock.
var concurrencyLimits = []quota.Limit{
	{Algorithm: quota.TokenBucket, Rate: 1, Period: time.Hour, Burst: 100},
	{Algorithm: quota.GCRA, Rate: 1, Period: time.Hour, Burst: 100},
	{Algorithm: quota.SlidingWindowCounter, Rate: 100, Period: time.Hour},
	{Algorithm: quota.SlidingWindowLog, Rate: 100, Period: time.Hour},
	{Algorithm: quota.FixedWindow, Rate: 100, Period: time.Hour},
}

const (
	goroutines = 8
	perG       = 40 // 320 attempts on a capacity of 100
	deadline   = 60 * time.Second
)

// parallelTakes has each of goroutines goroutines take takeFor(g) n times
// at once, and returns how many of each one's takes were allowed. It fails
// the test on any error, or if the goroutines do not all finish within
// deadline (a deadlock, or a hung store).
func parallelTakes(t *testing.T, st quota.Store, n int, takeFor func(g int) []quota.Bucket) (allowed [goroutines]int64) {
	t.Helper()
	errs := make(chan error, goroutines)
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			bs := takeFor(g)
			res := make([]quota.Result, len(bs))
			for range n {
				ok, err := st.Take(context.Background(), bs, res)
				if err != nil {
					errs <- err
					return
				}
				if ok {
					allowed[g]++
				}
			}
		}()
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(deadline):
		t.Fatalf("goroutines did not finish within %v", deadline)
	}
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	return allowed
}

func sum(counts [goroutines]int64) (total int64) {
	for _, n := range counts {
		total += n
	}
	return total
}

// concurrentOneBucket: 8 goroutines x 40 takes of cost 1 on one bucket of
// capacity 100 at a frozen clock: exactly 100 allowed, then the bucket
// reports 0 remaining.
func concurrentOneBucket(t *testing.T, st quota.Store, _ *clock.Fake, prefix string, l quota.Limit) {
	key := prefix + "hot"
	allowed := sum(parallelTakes(t, st, perG, func(int) []quota.Bucket {
		return []quota.Bucket{{Key: key, Limit: l, Cost: 1}}
	}))
	if allowed != 100 {
		t.Fatalf("%d of %d concurrent takes allowed, want exactly 100", allowed, goroutines*perG)
	}
	if r := take1(t, st, key, l, 1); r.Allowed || r.Remaining != 0 {
		t.Fatalf("after the burst: %s, want a deny with 0 remaining", fmtResult(r))
	}
}

// concurrentHierarchy: 8 goroutines, each with its own user bucket (token
// bucket burst 25, so a user never binds), all under one tenant bucket
// (fixed window 50 per hour), 20 takes each of [tenant, user] at a frozen
// clock. Exactly 50 are allowed (the tenant binds), and each user bucket
// was charged exactly for its own allowed takes: a probe then reports
// 25 - allowed_g - 1 remaining.
func concurrentHierarchy(t *testing.T, st quota.Store, _ *clock.Fake, prefix string) {
	tenant := quota.Limit{Algorithm: quota.FixedWindow, Rate: 50, Period: time.Hour}
	user := quota.Limit{Algorithm: quota.TokenBucket, Rate: 1, Period: time.Hour, Burst: 25}
	got := parallelTakes(t, st, 20, func(g int) []quota.Bucket {
		return []quota.Bucket{
			{Key: prefix + "tenant", Limit: tenant, Cost: 1},
			{Key: fmt.Sprintf("%suser%d", prefix, g), Limit: user, Cost: 1},
		}
	})
	for g, n := range got {
		r := take1(t, st, fmt.Sprintf("%suser%d", prefix, g), user, 1)
		if !r.Allowed || r.Remaining != 25-n-1 {
			t.Errorf("user %d: %d takes allowed, probe says %s, want allowed with %d remaining", g, n, fmtResult(r), 25-n-1)
		}
	}
	if total := sum(got); total != 50 {
		t.Fatalf("%d takes allowed in all, want exactly the tenant's 50 (per user: %v)", total, got)
	}
}

// concurrentOppositeOrder: half the goroutines take [a, b], half [b, a],
// at a frozen clock; both are fixed windows of 100. The store must neither
// deadlock nor double count: exactly 100 allowed, and both buckets are
// then exhausted. The keys share a hash tag: a Redis Cluster store that
// charges slots separately and refunds on deny may, under this contention,
// deny a take that a transient charge made look full, which is the
// documented price of spanning slots, not a conformance failure.
func concurrentOppositeOrder(t *testing.T, st quota.Store, _ *clock.Fake, prefix string) {
	l := quota.Limit{Algorithm: quota.FixedWindow, Rate: 100, Period: time.Hour}
	a, b := "{"+prefix+"}:a", "{"+prefix+"}:b"
	allowed := sum(parallelTakes(t, st, perG, func(g int) []quota.Bucket {
		if g%2 == 1 {
			return []quota.Bucket{{Key: b, Limit: l, Cost: 1}, {Key: a, Limit: l, Cost: 1}}
		}
		return []quota.Bucket{{Key: a, Limit: l, Cost: 1}, {Key: b, Limit: l, Cost: 1}}
	}))
	if allowed != 100 {
		t.Fatalf("%d takes allowed, want exactly 100", allowed)
	}
	for _, k := range []string{a, b} {
		if r := take1(t, st, k, l, 1); r.Allowed || r.Remaining != 0 {
			t.Fatalf("%s after the run: %s, want a deny with 0 remaining", k, fmtResult(r))
		}
	}
}

// badInput: malformed takes are errors, never decisions, and every store
// reports them with the same text, quota.ValidateTake's; an empty take is
// allowed.
func badInput(t reporter, st quota.Store, prefix string) {
	ctx := context.Background()
	ok := quota.Limit{Algorithm: quota.TokenBucket, Rate: 10, Period: time.Second, Burst: 10}
	fixed := quota.Limit{Algorithm: quota.FixedWindow, Rate: 10, Period: time.Hour}
	if allowed, err := st.Take(ctx, nil, nil); err != nil || !allowed {
		t.Errorf("empty Take = (%v, %v), want (true, nil)", allowed, err)
	}
	cases := []struct {
		name    string
		buckets []quota.Bucket
		res     int
	}{
		{"res shorter than buckets", []quota.Bucket{{Key: prefix + "a", Limit: ok, Cost: 1}, {Key: prefix + "b", Limit: ok, Cost: 1}}, 1},
		{"empty key", []quota.Bucket{{Key: prefix + "a", Limit: ok, Cost: 1}, {Key: "", Limit: ok, Cost: 1}}, 2},
		{"negative cost", []quota.Bucket{{Key: prefix + "c", Limit: ok, Cost: -1}}, 1},
		{"zero rate", []quota.Bucket{{Key: prefix + "d", Limit: quota.Limit{Rate: 0, Period: time.Second, Burst: 1}, Cost: 1}}, 1},
		{"zero burst", []quota.Bucket{{Key: prefix + "e", Limit: quota.Limit{Rate: 1, Period: time.Second}, Cost: 1}}, 1},
		{"sub-millisecond period", []quota.Bucket{{Key: prefix + "f", Limit: quota.Limit{Algorithm: quota.FixedWindow, Rate: 1, Period: time.Microsecond}, Cost: 1}}, 1},
		{"unknown algorithm", []quota.Bucket{{Key: prefix + "g", Limit: quota.Limit{Algorithm: 99, Rate: 1, Period: time.Second, Burst: 1}, Cost: 1}}, 1},
		{"same key twice", []quota.Bucket{{Key: prefix + "h", Limit: ok, Cost: 1}, {Key: prefix + "b", Limit: ok, Cost: 1}, {Key: prefix + "h", Limit: ok, Cost: 1}}, 3},
		{"unknown OnStoreError", []quota.Bucket{{Key: prefix + "a", Limit: ok, Cost: 1}, {Key: prefix + "i", Limit: ok, Cost: 1, OnStoreError: 9}}, 2},
		{"max wait on a window", []quota.Bucket{{Key: prefix + "a", Limit: ok, Cost: 1, MaxWait: time.Second}, {Key: prefix + "j", Limit: quota.Limit{Algorithm: quota.FixedWindow, Rate: 1, Period: time.Second}, Cost: 1, MaxWait: time.Second}}, 2},
		{"negative max wait", []quota.Bucket{{Key: prefix + "k", Limit: ok, Cost: 1, MaxWait: -time.Second}}, 1},
		{"max wait too long", []quota.Bucket{{Key: prefix + "l", Limit: ok, Cost: 1, MaxWait: quota.MaxMaxWait + time.Microsecond}}, 1},
		{"at most with a wait", []quota.Bucket{{Key: prefix + "m", Limit: ok, Cost: 1, MaxWait: time.Second}, {Key: prefix + "n", Limit: ok, Cost: 1, AtMost: true}}, 2},
		{"at most costs differ", []quota.Bucket{{Key: prefix + "o", Limit: ok, Cost: 2, AtMost: true}, {Key: prefix + "p", Limit: ok, Cost: 3, AtMost: true}}, 2},
		{"span on a token bucket", []quota.Bucket{{Key: prefix + "q", Limit: ok, Cost: 1, Span: quota.Span{Start: clock.Epoch, End: clock.Epoch.Add(time.Hour)}}}, 1},
		{"span ends before it starts", []quota.Bucket{{Key: prefix + "r", Limit: fixed, Cost: 1, Span: quota.Span{Start: clock.Epoch, End: clock.Epoch.Add(-time.Hour)}}}, 1},
		{"span without end", []quota.Bucket{{Key: prefix + "s", Limit: fixed, Cost: 1, Span: quota.Span{Start: clock.Epoch}}}, 1},
		{"span too long", []quota.Bucket{{Key: prefix + "t", Limit: fixed, Cost: 1, Span: quota.Span{Start: clock.Epoch, End: clock.Epoch.Add(quota.MaxSpan + time.Second)}}}, 1},
		{"span in nanoseconds", []quota.Bucket{{Key: prefix + "u", Limit: fixed, Cost: 1, Span: quota.Span{Start: clock.Epoch, End: clock.Epoch.Add(time.Hour + time.Nanosecond)}}}, 1},
	}
	for _, c := range cases {
		res := make([]quota.Result, c.res)
		want := quota.ValidateTake(c.buckets, res)
		if want == nil {
			t.Errorf("%s: quota.ValidateTake accepts this case; the suite is out of date", c.name)
			continue
		}
		if _, err := st.Take(ctx, c.buckets, res); err == nil {
			t.Errorf("%s: Take returned no error", c.name)
		} else if err.Error() != want.Error() {
			t.Errorf("%s: Take error:\n got  %s\n want %s (quota.ValidateTake's)", c.name, err, want)
		}
	}
	// None of those charged anything: the well-formed keys are still full.
	for _, k := range []string{"a", "b", "h"} {
		if r := take1(t, st, prefix+k, ok, 1); !r.Allowed || r.Remaining != 9 {
			t.Errorf("%s after rejected takes: %s, want allowed with 9 remaining", k, fmtResult(r))
		}
	}
}

// settleBadInput: a Settle of malformed buckets is refused with
// quota.ValidateSettle's error before anything is adjusted; an empty
// Settle succeeds; a negative cost is a refund, not an error.
func settleBadInput(t reporter, st quota.Settler, prefix string) {
	ctx := context.Background()
	tb := quota.Limit{Algorithm: quota.TokenBucket, Rate: 10, Period: time.Second, Burst: 10}
	if err := st.Settle(ctx, nil, nil); err != nil {
		t.Errorf("empty Settle: %v, want nil", err)
	}
	// "a" has 5 of 10 left; no refused Settle may change it.
	if r := take1(t, st, prefix+"a", tb, 5); !r.Allowed || r.Remaining != 5 {
		t.Fatalf("take 5 of 10: %s", fmtResult(r))
	}
	cases := []struct {
		name    string
		buckets []quota.Bucket
		took    []quota.Result
	}{
		{"empty key", []quota.Bucket{{Key: prefix + "a", Limit: tb, Cost: -1}, {Key: "", Limit: tb, Cost: 1}}, nil},
		{"zero rate", []quota.Bucket{{Key: prefix + "a", Limit: tb, Cost: -1}, {Key: prefix + "d", Limit: quota.Limit{Rate: 0, Period: time.Second, Burst: 1}, Cost: 1}}, nil},
		{"same key twice", []quota.Bucket{{Key: prefix + "a", Limit: tb, Cost: -1}, {Key: prefix + "a", Limit: tb, Cost: -1}}, nil},
		{"out of range", []quota.Bucket{{Key: prefix + "a", Limit: tb, Cost: -1}, {Key: prefix + "e", Limit: tb, Cost: quota.MaxSettle + 1}}, nil},
		{"took too short", []quota.Bucket{{Key: prefix + "a", Limit: tb, Cost: -1}, {Key: prefix + "f", Limit: tb, Cost: 1}}, make([]quota.Result, 1)},
	}
	for _, c := range cases {
		want := quota.ValidateSettle(c.buckets, c.took)
		if want == nil {
			t.Errorf("%s: quota.ValidateSettle accepts this case; the suite is out of date", c.name)
			continue
		}
		if err := st.Settle(ctx, c.buckets, c.took); err == nil {
			t.Errorf("%s: Settle returned no error", c.name)
		} else if err.Error() != want.Error() {
			t.Errorf("%s: Settle error:\n got  %s\n want %s (quota.ValidateSettle's)", c.name, err, want)
		}
	}
	// 6 > 5: denied with 5 remaining, as before the refused Settles.
	if r := take1(t, st, prefix+"a", tb, 6); r.Allowed || r.Remaining != 5 {
		t.Errorf("after refused Settles: %s, want a deny with 5 remaining", fmtResult(r))
	}
}
