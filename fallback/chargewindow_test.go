package fallback_test

import (
	"context"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/fallback"
	"github.com/floodgate-go/floodgate/quota"
	"github.com/floodgate-go/floodgate/testing/clock"
	"github.com/floodgate-go/floodgate/testing/redistest"
	"github.com/floodgate-go/floodgate/tiers/redisstore"
)

// windowStart is a whole minute: windows of a minute start there.
var windowStart = time.Unix(1_700_000_040, 0)

func windowBucket(key string, alg quota.Algorithm) quota.Bucket {
	return quota.Bucket{
		Key:          key,
		Limit:        quota.Limit{Algorithm: alg, Rate: 100, Period: time.Minute},
		Cost:         1,
		OnStoreError: quota.FailLocal,
	}
}

// windowFixture is a fallback Store over a real Redis store, both on one
// fake clock, with a ledger that stalls on command; 2 instances.
func windowFixture(t *testing.T, clk *clock.Fake) (*fallback.Store, *stalling, *redisstore.Store) {
	t.Helper()
	srv := redistest.Start(t)
	rs, err := redisstore.New(srv.Client(), redisstore.WithClock(clk))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = rs.Close() })
	led := &stalling{inner: rs}
	// A stall, however long on the fake clock, is slow, not down: the
	// breaker stays closed, so Sync reports. The budgets are long so that
	// a loaded host's Redis answers the takes before the stall (the
	// stalling ledger fails its takes at once, whatever the budget).
	s, err := fallback.New(led, fallback.WithClock(clk), fallback.WithManualSync(), fallback.WithSlowGrace(time.Hour),
		fallback.WithTimeout(2*time.Second), fallback.WithClosedTimeout(2*time.Second),
		fallback.WithInstances(func() int { return 2 }), fallback.WithLogger(slog.New(slog.NewTextHandler(testWriter{t}, nil))))
	if err != nil {
		t.Fatal(err)
	}
	if !s.ChargesLocal() {
		t.Fatal("ChargesLocal is false over a redis store")
	}
	return s, led, rs
}

// takeLocally takes b up to max times during a stall, until a deny, and
// returns how many were admitted, each decided locally.
func takeLocally(t *testing.T, s *fallback.Store, b quota.Bucket, max int) int {
	t.Helper()
	n := 0
	for ; n < max; n++ {
		ok, res := take(t, s, b)
		if !ok {
			break
		}
		if res[0].Source != floodgate.SourceLocalFallback {
			t.Fatalf("take %d decided by %s", n, res[0].Source)
		}
	}
	return n
}

// TestLocalWindowAdmitsAreCharged: units a window algorithm's rule
// (fixed window, sliding window counter, log; 100 a minute) admits
// locally while Redis stalls are charged to Redis once it answers,
// exactly once, through the recorded report path, as a token bucket's
// are (TestLocalAdmitsAreCharged): a report whose reply was lost after it
// was applied is resolved, not sent again; one lost before it arrived is
// sent again. The fake clock does not move, so Redis's window counts
// exactly what was admitted: 10 by Redis, then the 45 of this instance's
// share of the 90 left (2 instances).
func TestLocalWindowAdmitsAreCharged(t *testing.T) {
	t.Parallel()
	clk := clock.New(windowStart.Add(10 * time.Second))
	s, led, rs := windowFixture(t, clk)
	ctx := context.Background()
	for _, alg := range []quota.Algorithm{quota.FixedWindow, quota.SlidingWindowCounter, quota.SlidingWindowLog} {
		for _, c := range []struct {
			name string
			lose *atomic.Bool
		}{{"after", &led.loseAfter}, {"before", &led.loseBefore}} {
			t.Run(alg.String()+"/lost_"+c.name, func(t *testing.T) {
				b := windowBucket("wcharge:"+alg.String()+":"+c.name, alg)
				for i := range 10 {
					if ok, res := take(t, s, b); !ok || res[0].Source.Degraded() {
						t.Fatalf("store take %d: %v %+v", i, ok, res[0])
					}
				}
				led.stall.Store(true)
				n := takeLocally(t, s, b, 200)
				led.stall.Store(false)
				if n != 45 {
					t.Fatalf("admitted %d locally, want 45 (90 left / 2 instances)", n)
				}
				if got := remaining(t, rs, b); got != 90 {
					t.Fatalf("Redis has %d left before the report, want 90", got)
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
					t.Fatalf("Redis has %d left after the stall, want %d: its window counts %d for %d admitted", got, want, 100-got, 10+n)
				}
				if st := s.Stats(); st.Owed != 0 {
					t.Fatalf("still owed %d units", st.Owed)
				}
			})
		}
	}
	st := s.Stats()
	if st.Charged != 6*45 || st.ReportFailures != 6 || st.Debt != 0 || st.ChargeExpired != 0 {
		t.Fatalf("Stats: charged %d, report failures %d, debt %d, expired %d; want %d, 6, 0, 0",
			st.Charged, st.ReportFailures, st.Debt, st.ChargeExpired, 6*45)
	}
}

// TestLocalWindowAdmitsAcrossABoundary: a stall that spans a window
// boundary. Redis admits 10 at 0:50 of window k; the stall admits 20
// locally in window k and, from 1:10, 10 in window k+1; Redis answers at
// 1:10. Each unit is charged to the window it was admitted in, not the
// one current when Redis answers: a fixed window's window k is over, so
// its 20 are charged nothing (Stats.ChargeExpired) and window k+1 counts
// the 10; a sliding window counter's previous window counts 10 + 20,
// weighted by 50 s of 60 (25), and its current one 10: 35 counted, where
// charging all 30 to the current window would count 10·50/60 + 30 =
// 38.3.
func TestLocalWindowAdmitsAcrossABoundary(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		alg           quota.Algorithm
		left          int64
		charged, gone uint64
	}{
		{quota.FixedWindow, 90, 10, 20},
		{quota.SlidingWindowCounter, 65, 30, 0},
	} {
		t.Run(c.alg.String(), func(t *testing.T) {
			clk := clock.New(windowStart.Add(50 * time.Second))
			s, led, rs := windowFixture(t, clk)
			b := windowBucket("wbound:"+c.alg.String(), c.alg)
			for i := range 10 {
				if ok, res := take(t, s, b); !ok || res[0].Source.Degraded() {
					t.Fatalf("store take %d: %v %+v", i, ok, res[0])
				}
			}
			led.stall.Store(true)
			if n := takeLocally(t, s, b, 20); n != 20 {
				t.Fatalf("admitted %d locally in window k, want 20", n)
			}
			clk.Advance(20 * time.Second)
			if n := takeLocally(t, s, b, 10); n != 10 {
				t.Fatalf("admitted %d locally in window k+1, want 10", n)
			}
			led.stall.Store(false)
			if err := s.Sync(context.Background()); err != nil {
				t.Fatalf("Sync: %v", err)
			}
			if got := remaining(t, rs, b); got != c.left {
				t.Fatalf("Redis has %d left after the stall, want %d", got, c.left)
			}
			st := s.Stats()
			if st.Charged != c.charged || st.ChargeExpired != c.gone || st.Owed != 0 || st.Debt != 0 {
				t.Fatalf("Stats: charged %d, expired %d, owed %d, debt %d; want %d, %d, 0, 0",
					st.Charged, st.ChargeExpired, st.Owed, st.Debt, c.charged, c.gone)
			}
		})
	}
}

// TestLateWindowAnswerIsReconciled: a take decided locally in window k
// (admitted) whose call the store runs late, after the clock has moved
// into window k+1 (a paused Redis runs what was sent when it resumes):
// the store charged window k+1 for it, the request was admitted in window
// k. The Store gives the unit back to window k+1 and charges it to window
// k, so each window ends counting what was admitted in it: a fixed
// window's k is over (the unit expires, window k+1 counts 0); a sliding
// window counter's k is its previous window (it counts 1, weighted by
// 50 s of 60, and window k+1 counts 0).
func TestLateWindowAnswerIsReconciled(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		alg             quota.Algorithm
		left            int64
		charged, expire uint64
	}{
		{quota.FixedWindow, 100, 0, 1},
		{quota.SlidingWindowCounter, 99, 1, 0},
	} {
		t.Run(c.alg.String(), func(t *testing.T) {
			clk := clock.New(windowStart.Add(50 * time.Second))
			mem := newMemStore(t, clk).(quota.Reporter)
			g := &gated{Reporter: mem}
			// The background call runs for the slow grace (an hour):
			// the gate, not a timer, ends it.
			s, err := fallback.New(g, fallback.WithClock(clk), fallback.WithManualSync(), fallback.WithSlowGrace(time.Hour),
				fallback.WithTimeout(5*time.Millisecond), fallback.WithClosedTimeout(100*time.Millisecond),
				fallback.WithInstances(func() int { return 4 }), fallback.WithLogger(slog.New(slog.DiscardHandler)))
			if err != nil {
				t.Fatal(err)
			}
			b := windowBucket("late:"+c.alg.String(), c.alg)
			g.close()
			if ok, res := take(t, s, b); !ok || res[0].Source != floodgate.SourceLocalFallback {
				t.Fatalf("take: %v %+v, want admitted locally", ok, res[0])
			}
			clk.Advance(20 * time.Second)
			g.open()
			if !waitFor(lateWait, func() bool { return s.Stats().Late >= 1 }) {
				t.Fatalf("the late answer was not reconciled: %+v", s.Stats())
			}
			if err := s.Sync(context.Background()); err != nil {
				t.Fatal(err)
			}
			if got := remaining(t, mem, b); got != c.left {
				t.Fatalf("store has %d left, want %d", got, c.left)
			}
			st := s.Stats()
			if st.LateApplied != 1 || st.GivenBack != 1 || st.Charged != c.charged || st.ChargeExpired != c.expire || st.Owed != 0 {
				t.Fatalf("Stats: late applied %d, given back %d, charged %d, expired %d, owed %d; want 1, 1, %d, %d, 0",
					st.LateApplied, st.GivenBack, st.Charged, st.ChargeExpired, st.Owed, c.charged, c.expire)
			}
		})
	}
}

// TestLocalCalendarAdmitsAreCharged: a fixed window counted in calendar
// windows (quota.Bucket.Span, as the Limiter computes a day or a month)
// is charged by the Span its units were admitted in: 45 admitted locally
// in span A are charged to A; then 3 admitted locally in A and 5 in B,
// Redis answering in B: A is over, its 3 expire, and B counts the 5.
func TestLocalCalendarAdmitsAreCharged(t *testing.T) {
	t.Parallel()
	t0 := windowStart
	clk := clock.New(t0.Add(10 * time.Second))
	mem := newMemStore(t, clk).(quota.Reporter)
	led := &stalling{inner: mem}
	s, err := fallback.New(led, fallback.WithClock(clk), fallback.WithManualSync(), fallback.WithSlowGrace(time.Hour),
		fallback.WithInstances(func() int { return 2 }), fallback.WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	b := windowBucket("calendar", quota.FixedWindow)
	b.Limit.Period = 24 * time.Hour
	a, bb := b, b
	a.Span = quota.Span{Start: t0, End: t0.Add(90 * time.Second)}
	bb.Span = quota.Span{Start: a.Span.End, End: t0.Add(200 * time.Second)}
	for i := range 10 {
		if ok, res := take(t, s, a); !ok || res[0].Source.Degraded() {
			t.Fatalf("store take %d: %v %+v", i, ok, res[0])
		}
	}
	led.stall.Store(true)
	if n := takeLocally(t, s, a, 200); n != 45 {
		t.Fatalf("admitted %d locally, want 45 (90 left / 2 instances)", n)
	}
	led.stall.Store(false)
	if err := s.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	if got := remaining(t, mem, a); got != 45 {
		t.Fatalf("span A has %d left, want 45", got)
	}
	// One take Redis answers, a second later: the local limiter starts
	// again from it.
	clk.Advance(time.Second)
	if ok, res := take(t, s, a); !ok || res[0].Source.Degraded() {
		t.Fatalf("store take: %v %+v", ok, res[0])
	}
	led.stall.Store(true)
	if n := takeLocally(t, s, a, 3); n != 3 {
		t.Fatalf("admitted %d locally in A, want 3", n)
	}
	clk.Set(bb.Span.Start.Add(10 * time.Second))
	if n := takeLocally(t, s, bb, 5); n != 5 {
		t.Fatalf("admitted %d locally in B, want 5", n)
	}
	led.stall.Store(false)
	if err := s.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	if got := remaining(t, mem, bb); got != 95 {
		t.Fatalf("span B has %d left, want 95", got)
	}
	st := s.Stats()
	if st.Charged != 50 || st.ChargeExpired != 3 || st.Owed != 0 {
		t.Fatalf("Stats: charged %d, expired %d, owed %d; want 50, 3, 0", st.Charged, st.ChargeExpired, st.Owed)
	}
}
