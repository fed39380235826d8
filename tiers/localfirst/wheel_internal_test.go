package localfirst

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate/quota"
	"github.com/floodgate-go/floodgate/testing/clock"
	"github.com/floodgate-go/floodgate/tiers/memstore"
)

func newTestStore(t *testing.T, clk *clock.Fake, ledger Ledger, exact quota.Store, opts ...Option) *Store {
	t.Helper()
	opts = append([]Option{WithClock(clk), WithManualSync()}, opts...)
	s, err := New(exact, ledger, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close(context.Background()) })
	return s
}

func testBucket(key string, mode quota.Consistency, rate, burst int64, period time.Duration) quota.Bucket {
	b := quota.Bucket{Key: key, Rule: key, Cost: 1, Consistency: mode,
		Limit: quota.Limit{Algorithm: quota.TokenBucket, Rate: rate, Period: period, Burst: burst}}
	if mode == quota.Async {
		b.SyncInterval = 50 * time.Millisecond
	}
	return b
}

func takeOK(t *testing.T, s *Store, bs ...quota.Bucket) bool {
	t.Helper()
	res := make([]quota.Result, len(bs))
	ok, err := s.Take(context.Background(), bs, res)
	if err != nil {
		t.Fatal(err)
	}
	return ok
}

// TestSyncLagNotHiddenByLaterHits: a key falls due 10s after it was
// new; the Syncs stall for a second past that. A hit (or a take that was
// denied and undone) shortly before the late Sync does not make the key
// fall due later: MaxSyncLag should be the full second, not the time since that last hit.
func TestSyncLagNotHiddenByLaterHits(t *testing.T) {
	t.Parallel()
	full := testBucket("lag-full", quota.Async, 1, 1, 1000*time.Hour)
	for _, tc := range []struct {
		name   string
		lateOp func(t *testing.T, s *Store, b quota.Bucket)
	}{
		{"a hit after it fell due", func(t *testing.T, s *Store, b quota.Bucket) {
			if !takeOK(t, s, b) {
				t.Fatal("late hit denied")
			}
		}},
		{"a denied take, undone", func(t *testing.T, s *Store, b quota.Bucket) {
			// full's share of 1 is spent: the take of both is denied
			// locally, and b's hit is undone.
			if takeOK(t, s, full, b) {
				t.Fatal("take of a spent key allowed")
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clk := clock.New(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
			m, err := memstore.New(memstore.WithClock(clk))
			if err != nil {
				t.Fatal(err)
			}
			s := newTestStore(t, clk, m, m)
			b := testBucket("lag", quota.Async, 1000, 1000, 1000*time.Hour) // no refill to speak of
			takeOK(t, s, full)                                              // spends full's whole share of 1
			read := b
			read.Cost = 0
			takeOK(t, s, read) // new: a full share, nothing spent
			takeOK(t, s, b)    // 1 unit: due 10s from now (maxReportWait)
			// full (at its share) is due after a quarter interval: report
			// it now, on time, so that only b's lag counts below.
			clk.Advance(20 * time.Millisecond)
			if err := s.Sync(context.Background()); err != nil {
				t.Fatal(err)
			}
			if st := s.Stats(); st.Reports != 1 || st.MaxSyncLag > 10*time.Millisecond {
				t.Fatalf("%+v: want full reported, on time", st)
			}
			// b is due at 10s; no Sync until 11s (a stalled ledger, a
			// slow previous Sync...).
			clk.Advance(10*time.Second + 970*time.Millisecond)
			tc.lateOp(t, s, b)
			clk.Advance(10 * time.Millisecond)
			if err := s.Sync(context.Background()); err != nil {
				t.Fatal(err)
			}
			st := s.Stats()
			if st.Reports != 2 {
				t.Fatalf("%+v: want b reported", st)
			}
			if st.MaxSyncLag < time.Second-10*time.Millisecond {
				t.Errorf("MaxSyncLag = %v, want ≈1s: the report fell due at 10s and was sent at 11s", st.MaxSyncLag)
			}
		})
	}
}

// flakyLedger fails report calls at random: applied with the reply lost,
// lost on the way, or refused; and fails Resolve calls at random.
type flakyLedger struct {
	Ledger
	mu  sync.Mutex
	rnd *rand.Rand
	on  atomic.Bool
}

func (l *flakyLedger) roll() int {
	if !l.on.Load() {
		return 99
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.rnd.IntN(100)
}

func (l *flakyLedger) Report(ctx context.Context, inst, seq uint64, b []quota.Bucket, res []quota.ReportResult) error {
	switch r := l.roll(); {
	case r < 10: // applied, reply lost
		_ = l.Ledger.Report(ctx, inst, seq, b, res)
		clear(res)
		return context.DeadlineExceeded
	case r < 20: // never arrived
		clear(res)
		return context.DeadlineExceeded
	}
	return l.Ledger.Report(ctx, inst, seq, b, res)
}

func (l *flakyLedger) Resolve(ctx context.Context, inst, seq uint64, b []quota.Bucket, res []quota.ReportResult) error {
	if l.roll() < 20 {
		return context.DeadlineExceeded
	}
	return l.Ledger.Resolve(ctx, inst, seq, b, res)
}

// checkWheel checks, with nothing running, that every entry that holds or
// owes something is pending, and that every pending entry is filed on the
// wheel where a Sync at or after its wake finds it.
func checkWheel(t *testing.T, s *Store, now time.Time, flips bool) {
	t.Helper()
	s.pmu.Lock()
	defer s.pmu.Unlock()
	w := &s.wheel
	onNow := map[*entry]bool{}
	for _, e := range w.now {
		onNow[e] = true
	}
	bad := 0
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		for k, e := range sh.entries {
			e.mu.Lock()
			at, wake := e.at.Load(), e.wake.Load()
			var why string
			switch {
			case !e.idle() && !e.queued:
				why = "holds or owes something, not pending"
			case !e.queued:
			case at == atNone:
				why = "pending, on no slot"
			case at == atNow:
				if !onNow[e] {
					why = "at now, not on the now list"
				}
			case at < w.cur || at >= w.cur+wheelSlots:
				why = fmt.Sprintf("filed at %d outside [%d, %d)", at, w.cur, w.cur+wheelSlots)
			default:
				found := false
				for _, x := range w.slots[at%wheelSlots] {
					found = found || x == e
				}
				if !found {
					why = "not in its slot"
				} else if tw := tickOf(wake); tw < at {
					why = fmt.Sprintf("filed at tick %d after its wake's tick %d", at, tw)
				}
			}
			if why == "" && !flips && e.queued && e.units > 0 && wake > e.expires.UnixNano() {
				why = "wake after its lease's expiry"
			}
			if why == "" && !flips && e.queued && e.owed > 0 && e.returning == 0 && wake > now.UnixNano() {
				why = "owes a return, wake in the future"
			}
			// A report's wake is never after it falls due (rise counts on
			// it to skip the arithmetic).
			if why == "" && e.mode == quota.Async && e.queued && e.u > 0 && e.inflight == 0 && e.known &&
				wake > e.lastReport.Add(e.reportEvery()).UnixNano() {
				why = "wake after its report falls due"
			}
			if why != "" {
				bad++
				if bad < 10 {
					t.Errorf("%s: %s (queued %v at %d wake %d cur %d; units %d owed %d returning %d u %d inflight %d)",
						k, why, e.queued, at, tickOf(wake), w.cur, e.units, e.owed, e.returning, e.u, e.inflight)
				}
			}
			e.mu.Unlock()
		}
		sh.mu.Unlock()
	}
}

// TestWheelInvariantsUnderLoad: takers, settlers and a syncer on a
// moving fake clock, with a ledger that fails at random; at pauses,
// every entry that holds or owes anything is on the wheel, no later than
// its wake.
func TestWheelInvariantsUnderLoad(t *testing.T) {
	t.Parallel()
	t.Run("plain", func(t *testing.T) {
		t.Parallel()
		wheelLoad(t, false)
	})
	t.Run("flips and key bound", func(t *testing.T) {
		t.Parallel()
		wheelLoad(t, true)
	})
}

func wheelLoad(t *testing.T, flips bool) {
	clk := clock.New(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
	m, err := memstore.New(memstore.WithClock(clk))
	if err != nil {
		t.Fatal(err)
	}
	fl := &flakyLedger{Ledger: m, rnd: rand.New(rand.NewPCG(1, 2))}
	fl.on.Store(true)
	s := newTestStore(t, clk, fl, m, WithInstances(func() int { return 2 }),
		WithLeaseTTL(50*time.Millisecond), WithLeaseTarget(10*time.Millisecond), WithSyncTimeout(time.Second))
	if flips {
		s = newTestStore(t, clk, fl, m, WithInstances(func() int { return 2 }),
			WithLeaseTTL(50*time.Millisecond), WithLeaseTarget(10*time.Millisecond), WithSyncTimeout(time.Second), WithMaxKeys(20))
	}
	const keys = 24
	bs := make([]quota.Bucket, keys)
	for i := range bs {
		mode := quota.Async
		if i%2 == 1 {
			mode = quota.Leased
		}
		bs[i] = testBucket(fmt.Sprintf("load%d", i), mode, 1000, 5000, time.Second)
	}
	var gate sync.RWMutex
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for g := range 6 {
		wg.Go(func() {
			rnd := rand.New(rand.NewPCG(uint64(g), 7))
			res := make([]quota.Result, 2)
			for {
				select {
				case <-stop:
					return
				default:
				}
				gate.RLock()
				a, b := rnd.IntN(keys), rnd.IntN(keys)
				take := []quota.Bucket{bs[a]}
				if a != b && rnd.IntN(3) == 0 {
					take = append(take, bs[b])
				}
				if flips && rnd.IntN(5) == 0 {
					take[0].Consistency = quota.Async + quota.Leased - take[0].Consistency
					take[0].SyncInterval = 50 * time.Millisecond
				}
				if flips && rnd.IntN(5) == 0 {
					take[0] = testBucket(fmt.Sprintf("loadnew%d", rnd.IntN(200)), take[0].Consistency, 1000, 5000, time.Second)
				}
				ok, err := s.Take(context.Background(), take, res[:len(take)])
				if err == nil && ok && rnd.IntN(4) == 0 {
					st := make([]quota.Bucket, len(take))
					copy(st, take)
					for i := range st {
						st[i].Cost = int64(rnd.IntN(3)) - 1
					}
					_ = s.Settle(context.Background(), st, res[:len(take)])
				}
				gate.RUnlock()
			}
		})
	}
	wg.Go(func() {
		rnd := rand.New(rand.NewPCG(9, 9))
		for {
			select {
			case <-stop:
				return
			default:
			}
			gate.RLock()
			clk.Advance(time.Duration(1+rnd.IntN(23)) * time.Millisecond)
			switch rnd.IntN(20) {
			case 0:
				_ = s.Flush(context.Background())
			default:
				_ = s.Sync(context.Background())
			}
			gate.RUnlock()
		}
	})
	deadline := time.Now().Add(1500 * time.Millisecond)
	for i := 0; i < 300 && time.Now().Before(deadline); i++ {
		time.Sleep(2 * time.Millisecond)
		gate.Lock()
		checkWheel(t, s, clk.Now(), flips)
		gate.Unlock()
		if t.Failed() {
			break
		}
	}
	close(stop)
	wg.Wait()
	checkWheel(t, s, clk.Now(), flips)
	t.Logf("%+v", s.Stats())
}

// TestPlaceSeesAnEarlierWake: a take that moves an entry's wake earlier
// while a Sync files it (after the Sync read the wake, before it stored
// the tick) finds the entry on no slot and leaves it to the Sync, as mark
// does; the entry must still end up filed by the earlier wake. Before
// place read the wake again, it stayed at the later tick, and its report
// waited for it (TestWheelInvariantsUnderLoad caught this once in CI:
// filed at tick 177236645804 after its wake's tick 177236645785).
func TestPlaceSeesAnEarlierWake(t *testing.T) {
	t.Parallel()
	w := &wheel{cur: 100}
	e := &entry{}
	e.queued = true
	e.wake.Store(300 * int64(tick))
	takes := 0
	w.filing = func(e *entry) {
		if takes > 0 {
			return
		}
		takes++
		// The take, under e.mu: an earlier wake, then mark's look at
		// where the entry is filed.
		e.wake.Store(150 * int64(tick))
		if at := e.at.Load(); at != atNone {
			t.Fatalf("the take found the entry at %d, want it on no slot (atNone)", at)
		}
	}
	w.place(e)
	if at := e.at.Load(); at != 150 {
		t.Fatalf("filed at tick %d, want 150, the tick of its wake", at)
	}
	found := false
	for _, x := range w.slots[150%wheelSlots] {
		found = found || x == e
	}
	if !found {
		t.Fatal("not in slot 150")
	}
	// The copy left at 300 is stale: a take of the wheel up to 300 hands
	// the entry out once, at 150.
	if got := w.take(300, false, nil); len(got) != 1 || got[0] != e {
		t.Fatalf("take up to 300: %d entries, want the entry once", len(got))
	}
}
