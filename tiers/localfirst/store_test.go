package localfirst_test

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/quota"
	"github.com/floodgate-go/floodgate/testing/clock"
	"github.com/floodgate-go/floodgate/tiers/localfirst"
	"github.com/floodgate-go/floodgate/tiers/memstore"
)

var t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

// fixture is one shared ledger (the fleet's budget) and a fake clock.
type fixture struct {
	clk    *clock.Fake
	ledger *memstore.Store
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	clk := clock.New(t0)
	m, err := memstore.New(memstore.WithClock(clk))
	if err != nil {
		t.Fatal(err)
	}
	return &fixture{clk: clk, ledger: m}
}

// instance is one process's local-first store over the shared ledger.
func (f *fixture) instance(t *testing.T, n int, opts ...localfirst.Option) *localfirst.Store {
	t.Helper()
	opts = append([]localfirst.Option{localfirst.WithClock(f.clk), localfirst.WithManualSync(),
		localfirst.WithInstances(func() int { return n })}, opts...)
	s, err := localfirst.New(f.ledger, f.ledger, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close(context.Background()) })
	return s
}

// remaining reads the ledger's bucket without charging it.
func (f *fixture) remaining(t *testing.T, b quota.Bucket) int64 {
	t.Helper()
	b.Cost = 0
	b.Consistency = quota.Exact
	res := make([]quota.Result, 1)
	if _, err := f.ledger.Take(context.Background(), []quota.Bucket{b}, res); err != nil {
		t.Fatal(err)
	}
	return res[0].Remaining
}

func bucket(key string, mode quota.Consistency, rate, burst int64) quota.Bucket {
	b := quota.Bucket{Key: key, Rule: key, Cost: 1, Consistency: mode,
		Limit: quota.Limit{Algorithm: quota.TokenBucket, Rate: rate, Period: time.Second, Burst: burst}}
	if mode == quota.Async {
		b.SyncInterval = 50 * time.Millisecond
	}
	return b
}

func take(t *testing.T, s *localfirst.Store, bs ...quota.Bucket) (bool, []quota.Result) {
	t.Helper()
	res := make([]quota.Result, len(bs))
	ok, err := s.Take(context.Background(), bs, res)
	if err != nil {
		t.Fatal(err)
	}
	return ok, res
}

// drain takes until the first deny (at most max takes) and returns how
// many were admitted and by which source.
func drain(t *testing.T, s *localfirst.Store, max int, bs ...quota.Bucket) (int, map[floodgate.Source]int) {
	t.Helper()
	src := map[floodgate.Source]int{}
	for i := 0; i < max; i++ {
		ok, res := take(t, s, bs...)
		if !ok {
			return i, src
		}
		s := res[0].Source
		if s == "" {
			s = floodgate.SourceStore
		}
		src[s]++
	}
	t.Fatalf("no deny within %d takes", max)
	return 0, nil
}

func TestExactPassesThrough(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	s := f.instance(t, 1)
	b := bucket("k", quota.Exact, 10, 3)
	n, src := drain(t, s, 100, b)
	if n != 3 || src[floodgate.SourceStore] != 3 {
		t.Fatalf("admitted %d (%v), want 3 from the store", n, src)
	}
	if st := s.Stats(); st.Keys != 0 || st.LocalAllowed != 0 {
		t.Fatalf("an exact take left local state: %+v", st)
	}
}

// TestLeasedExactCounts: one instance, one instant: a lease never admits
// more than the bucket holds, and spends all of it.
func TestLeasedExactCounts(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	s := f.instance(t, 1)
	b := bucket("lease", quota.Leased, 10, 10)
	n, src := drain(t, s, 100, b)
	if n != 10 {
		t.Fatalf("admitted %d in one instant, want exactly the burst 10 (%v)", n, src)
	}
	if src[floodgate.SourceLease] == 0 || src[floodgate.SourceStore] == 0 {
		t.Fatalf("sources %v: want both store takes (leases) and local lease spends", src)
	}
	st := s.Stats()
	if st.Leases == 0 || int(st.LeasedUnits) != src[floodgate.SourceLease] {
		t.Fatalf("stats %+v: leased units should equal the lease spends %d", st, src[floodgate.SourceLease])
	}
	// One second refills 10; the lease grows with demand but never past
	// half the capacity (WithLeaseShare default 0.5) per lease.
	f.clk.Advance(time.Second)
	if n, _ := drain(t, s, 100, b); n != 10 {
		t.Fatalf("after a refill admitted %d, want 10", n)
	}
}

// TestLeaseReturn: unspent units go back when the lease expires, and on
// Close.
func TestLeaseReturn(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	s := f.instance(t, 1, localfirst.WithLeaseTTL(time.Second))
	b := bucket("lease", quota.Leased, 1000, 1000)
	// Warm the key: the first take is exact, later ones lease 1, 2, 4...
	for i := 0; i < 4; i++ {
		if ok, _ := take(t, s, b); !ok {
			t.Fatal("denied")
		}
	}
	// Takes so far: 1 (exact), 1+1 (lease 1), 1 local, 1+2 (lease 2):
	// 4 admitted, 6 charged, 2 held.
	if got := f.remaining(t, b); got != 1000-6 {
		t.Fatalf("ledger remaining %d, want %d", got, 1000-6)
	}
	if err := s.Sync(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := f.remaining(t, b); got != 1000-6 {
		t.Fatalf("a live lease was returned early: remaining %d", got)
	}
	f.clk.Advance(time.Second)
	if err := s.Sync(context.Background()); err != nil {
		t.Fatal(err)
	}
	// 1s later the bucket refilled to 1000 anyway; check the counter and
	// that nothing is held.
	st := s.Stats()
	if st.ReturnedUnits != 2 {
		t.Fatalf("returned %d units on expiry, want 2 (%+v)", st.ReturnedUnits, st)
	}

	// On Close: a fresh lease is given back at once.
	s2 := f.instance(t, 1)
	b2 := bucket("lease2", quota.Leased, 1, 100) // no refill to speak of
	for i := 0; i < 4; i++ {
		take(t, s2, b2)
	}
	if got := f.remaining(t, b2); got != 100-6 {
		t.Fatalf("ledger remaining %d, want 94", got)
	}
	if err := s2.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := f.remaining(t, b2); got != 100-4 {
		t.Fatalf("after Close remaining %d, want 96 (the 2 held units back)", got)
	}
}

// TestAsyncExactCounts: one instance decides locally on the known state
// and reports; counts are exact.
func TestAsyncExactCounts(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	s := f.instance(t, 1)
	b := bucket("async", quota.Async, 10, 10)
	n, src := drain(t, s, 100, b)
	if n != 10 || src[floodgate.SourceAsync] != 10 {
		t.Fatalf("admitted %d (%v), want 10 local (a new key starts from a full share)", n, src)
	}
	_, res := take(t, s, b)
	if res[0].Source != floodgate.SourceAsync || res[0].RetryAfter <= 0 {
		t.Fatalf("local deny %+v: want async source and a retry-after", res[0])
	}
	if got := f.remaining(t, b); got != 10 {
		t.Fatalf("before the report the ledger has %d, want 10 (nothing asked)", got)
	}
	// Near its share, the key is reported within a quarter interval.
	f.clk.Advance(12500 * time.Microsecond)
	if err := s.Sync(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := f.remaining(t, b); got != 0 {
		t.Fatalf("after the report the ledger has %d, want 0", got)
	}
	st := s.Stats()
	if st.Reports != 1 || st.ReportedUnits != 10 || st.DebtUnits != 0 {
		t.Fatalf("stats %+v", st)
	}
	f.clk.Advance(time.Second)
	if n, _ := drain(t, s, 100, b); n != 10 {
		t.Fatalf("after a full refill admitted %d, want 10", n)
	}
}

// TestAsyncEvenSplit: two instances sharing one bucket each decide on
// half of it: together exactly the burst.
func TestAsyncEvenSplit(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	a, b2 := f.instance(t, 2), f.instance(t, 2)
	b := bucket("shared", quota.Async, 10, 10)
	na, _ := drain(t, a, 100, b)
	nb, _ := drain(t, b2, 100, b)
	if na+nb != 10 {
		t.Fatalf("admitted %d + %d, want 10 together", na, nb)
	}
}

// TestAsyncBound scripts the worst case of stale state: instance A learns
// the state and goes quiet; B spends its share, reports, and does so again
// until the bucket is empty; then A spends its share of what it knew.
// Over-admission stays within the documented bound (n−1)/n × (C + rate × I).
func TestAsyncBound(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	const n, burst, rate = 2, 100, 100
	a, b2 := f.instance(t, n), f.instance(t, n)
	bk := bucket("stale", quota.Async, rate, burst)
	take(t, a, bk)  // A: new key, takes its share as full (50)
	take(t, b2, bk) // B: the same
	nb := 0
	start := f.clk.Now()
	for range 20 {
		k, _ := drain(t, b2, 1000, bk)
		nb += k
		f.clk.Advance(12500 * time.Microsecond) // a key near its share reports every quarter interval
		if err := b2.Sync(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	na, _ := drain(t, a, 1000, bk) // A still decides on R = 99
	admitted := 2 + na + nb
	if err := a.Sync(context.Background()); err != nil {
		t.Fatal(err)
	}
	allowed := burst + int(rate*f.clk.Now().Sub(start).Seconds())
	over := admitted - allowed
	t.Logf("A admitted %d, B %d, cold 2: over by %d", na, nb, over)
	bound := float64(n-1) / n * (burst + rate*0.05)
	if over <= 0 || float64(over) > bound {
		t.Fatalf("admitted %d of %d: over by %d, want within (0, %.1f]", admitted, allowed, over, bound)
	}
	// What the store had no room for is carried as debt, not forgotten:
	// the debt is the over-admission plus the refill the store's full
	// bucket lost while B's first spending was on its way (B spent its
	// share at once, reported a quarter interval later: rate × 12.5 ms
	// = 1.25 units, so 2 whole units).
	if da, db := a.Stats().DebtUnits, b2.Stats().DebtUnits; da+db != uint64(over)+2 {
		t.Fatalf("debt %d + %d, want the over-admission %d + the 2 units of lost refill", da, db, over)
	}
}

// TestMixedAllOrNothing: a local level reserves first and gives back when
// an exact level denies; an exact level is not charged when a local level
// denies.
func TestMixedAllOrNothing(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	s := f.instance(t, 1)
	local := bucket("tenant", quota.Async, 1000, 1000)
	exact := bucket("login", quota.Exact, 1, 2)
	take(t, s, local) // a new key: decided locally from a full share
	for i := 0; i < 2; i++ {
		if ok, _ := take(t, s, exact, local); !ok {
			t.Fatal("denied within both limits")
		}
	}
	before := s.Stats()
	ok, res := take(t, s, exact, local)
	f.clk.Advance(10 * time.Second) // a key this far below its share reports within maxReportWait
	if ok || res[0].Allowed || res[0].Source != "" && res[0].Source != floodgate.SourceStore {
		t.Fatalf("third login: %v %+v, want a store deny", ok, res)
	}
	// The local reservation was given back: 3 local units spent in all,
	// reported as 3.
	if err := s.Sync(context.Background()); err != nil {
		t.Fatal(err)
	}
	if st := s.Stats(); st.ReportedUnits != 3 {
		t.Fatalf("reported %d units, want 3 (the denied take's reservation undone); before %+v", st.ReportedUnits, before)
	}

	// A local deny never charges the exact level.
	tight := bucket("tight", quota.Async, 1, 1)
	roomy := bucket("roomy", quota.Exact, 1000, 1000)
	take(t, s, tight) // a new key: spends its full share, the only unit
	ok, _ = take(t, s, roomy, tight)
	if ok {
		t.Fatal("allowed past an empty async bucket")
	}
	if got := f.remaining(t, roomy); got != 1000 {
		t.Fatalf("the exact level was charged by a take denied locally: %d left", got)
	}
}

func TestOptionErrors(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	_, err := localfirst.New(nil, nil, localfirst.WithLeaseTTL(time.Millisecond), localfirst.WithLeaseShare(2),
		localfirst.WithInstances(nil), localfirst.WithSyncTimeout(0), localfirst.WithMaxKeys(0), nil)
	if err == nil {
		t.Fatal("New accepted bad options")
	}
	for _, want := range []string{"nil exact store", "nil ledger", "WithLeaseTTL", "WithLeaseShare", "WithInstances", "WithSyncTimeout", "WithMaxKeys", "nil Option"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not name %s", err, want)
		}
	}
	if _, err := localfirst.New(f.ledger, f.ledger, localfirst.WithLeaseTarget(2*time.Second)); err == nil || !strings.Contains(err.Error(), "below the lease TTL") {
		t.Errorf("lease target above TTL: %v", err)
	}
}

func TestBadTake(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	s := f.instance(t, 1)
	b := bucket("x", quota.Leased, 10, 10)
	b.Cost = -1
	_, err := s.Take(context.Background(), []quota.Bucket{b}, make([]quota.Result, 1))
	if err == nil || err.Error() != quota.ValidateTake([]quota.Bucket{b}, make([]quota.Result, 1)).Error() {
		t.Fatalf("err = %v, want quota.ValidateTake's", err)
	}
}

// hookStore is an exact store that allows takes of local buckets alone
// (a cold key learning its state), and runs hook, then denies, for any
// take with an exact bucket.
type hookStore struct {
	hook  func()
	calls *int
}

func (h hookStore) Take(_ context.Context, bs []quota.Bucket, res []quota.Result) (bool, error) {
	exact := false
	for _, b := range bs {
		exact = exact || b.Consistency == quota.Exact
	}
	for i := range bs {
		c := bs[i].Limit.Capacity()
		res[i] = quota.Result{Allowed: !exact, Limit: c, Remaining: c - bs[i].Cost}
		if exact {
			res[i] = quota.Result{Limit: c, Remaining: c, RetryAfter: time.Second}
		}
	}
	if exact {
		*h.calls++
		h.hook()
	}
	return !exact, nil
}

// TestCancelAfterReport: a reservation cancelled after a sync already
// reported its unit leaves a credit, not a negative report: no report
// fails and Close is clean.
func TestCancelAfterReport(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	var s *localfirst.Store
	calls := 0
	exact := hookStore{calls: &calls, hook: func() { _ = s.Close(context.Background()) }} // reports everything, now
	s2, err := localfirst.New(exact, f.ledger, localfirst.WithClock(f.clk), localfirst.WithManualSync())
	if err != nil {
		t.Fatal(err)
	}
	s = s2
	local := bucket("tenant", quota.Async, 1000, 1000)
	gate := bucket("gate", quota.Exact, 10, 10)
	take(t, s, local) // a new key: decided locally
	if ok, _ := take(t, s, local, gate); ok || calls != 1 {
		t.Fatalf("allowed=%v with %d exact calls: want the exact level asked once, and denying", ok, calls)
	}
	if st := s.Stats(); st.ReportedUnits != 2 {
		t.Fatalf("the hook's sync reported %d units, want 2: the first take's and the reserved one", st.ReportedUnits)
	}
	// A read of the key (cost 0) puts it back on the sync list with its
	// credit.
	read := local
	read.Cost = 0
	take(t, s, read)
	f.clk.Advance(time.Second)
	if err := s.Sync(context.Background()); err != nil {
		t.Fatalf("Sync after a cancelled reservation: %v", err)
	}
	if st := s.Stats(); st.ReportFailures != 0 {
		t.Fatalf("reports failed: %+v", st)
	}
}

// downLedger is a ledger whose Redis is gone: every call fails.
type downLedger struct{ localfirst.Ledger }

func (downLedger) Take(context.Context, []quota.Bucket, []quota.Result) (bool, error) {
	return false, context.DeadlineExceeded
}
func (downLedger) Report(context.Context, uint64, uint64, []quota.Bucket, []quota.ReportResult) error {
	return context.DeadlineExceeded
}
func (downLedger) Resolve(context.Context, uint64, uint64, []quota.Bucket, []quota.ReportResult) error {
	return context.DeadlineExceeded
}

// TestAsyncThroughAnOutage: with every report failing for 10 s, an async
// key keeps admitting its share's rate (not just its capacity once), and
// the unreported hits are all kept for when the store is back.
func TestAsyncThroughAnOutage(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	warm := f.instance(t, 2)
	b := bucket("outage", quota.Async, 10, 10)
	take(t, warm, b) // learn: 9 left, a share of 4.5
	_ = warm.Close(context.Background())

	s, err := localfirst.New(f.ledger, downLedger{f.ledger}, localfirst.WithClock(f.clk), localfirst.WithManualSync(),
		localfirst.WithInstances(func() int { return 2 }))
	if err != nil {
		t.Fatal(err)
	}
	take(t, s, b) // cold here: exact through the (healthy) exact store: 8 left, share 4
	admitted := 0
	for step := 0; step < 100; step++ { // 10 s in 100 ms steps
		n, _ := drain(t, s, 100, b)
		admitted += n
		_ = s.Sync(context.Background()) // fails: the ledger is down
		f.clk.Advance(100 * time.Millisecond)
	}
	// Share 4 at once, then 10/s / 2 instances for 9.9 s = 49.5: 53.
	if admitted != 53 {
		t.Fatalf("admitted %d over a 10 s outage, want 53 (the share, then rate/n)", admitted)
	}
	if st := s.Stats(); st.ReportFailures == 0 || st.ReportedUnits != 0 {
		t.Fatalf("stats %+v: want failed reports and nothing reported", st)
	}
}

// TestReportCadenceFollowsHeadroom: a key's report waits longer the less
// of its share it has spent: at half its share a quarter interval, at a
// quarter 2 intervals, at 1/16 8 intervals, a single unit at most 10s.
func TestReportCadenceFollowsHeadroom(t *testing.T) {
	t.Parallel()
	const iv = 50 * time.Millisecond
	for _, tc := range []struct {
		spent      int
		notYet, by time.Duration
	}{
		{spent: 500, notYet: iv/4 - time.Microsecond, by: iv / 4},
		{spent: 250, notYet: 100*time.Millisecond - time.Microsecond, by: 2 * iv},   // share 1000: 2 intervals
		{spent: 62, notYet: 8 * iv, by: 9 * iv},                                     // 1000/(2*62) = 8.06 intervals
		{spent: 1, notYet: 10*time.Second - time.Microsecond, by: 10 * time.Second}, // 499.5 intervals, capped
	} {
		f := newFixture(t)
		s := f.instance(t, 1)
		b := bucket(fmt.Sprintf("cadence-%d", tc.spent), quota.Async, 1000, 1000)
		read := b
		read.Cost = 0
		take(t, s, read) // a new key, taken as a full share; nothing to report
		if err := s.Sync(context.Background()); err != nil {
			t.Fatal(err)
		}
		for range tc.spent {
			if ok, _ := take(t, s, b); !ok {
				t.Fatal("denied within the share")
			}
		}
		f.clk.Advance(tc.notYet)
		if err := s.Sync(context.Background()); err != nil {
			t.Fatal(err)
		}
		if st := s.Stats(); st.Reports != 0 {
			t.Fatalf("%d spent: reported after %s, want not before %s", tc.spent, tc.notYet, tc.by)
		}
		f.clk.Advance(tc.by - tc.notYet)
		if err := s.Sync(context.Background()); err != nil {
			t.Fatal(err)
		}
		if st := s.Stats(); st.Reports != 1 || st.ReportedUnits != uint64(tc.spent) {
			t.Fatalf("%d spent: after %s stats %+v, want one report of %d", tc.spent, tc.by, st, tc.spent)
		}
	}
}

// TestReportCappedAtCapacity: after an outage an instance owes at most its
// share of the capacity (the rest was paid by the refill meanwhile), sent
// in one report that the store can take.
func TestReportCappedAtCapacity(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	l := &switchLedger{Ledger: f.ledger}
	s, err := localfirst.New(f.ledger, l, localfirst.WithClock(f.clk), localfirst.WithManualSync(),
		localfirst.WithInstances(func() int { return 1 }))
	if err != nil {
		t.Fatal(err)
	}
	b := bucket("owes", quota.Async, 10, 10)
	take(t, s, b) // cold, exact: 9 left, learned
	l.down.Store(true)
	admitted := 0
	for range 30 { // 3 s of outage at 10/s: 9 at once, then the refill
		n, _ := drain(t, s, 100, b)
		admitted += n
		_ = s.Sync(context.Background())
		f.clk.Advance(100 * time.Millisecond)
	}
	if admitted != 9+29 {
		t.Fatalf("admitted %d locally through the outage, want 38", admitted)
	}
	l.down.Store(false)
	// 38 were admitted at the share's rate (10/s for one instance), which
	// the ledger's bucket refilled meanwhile: what is still owed is one
	// share (here the capacity, 10), charged in one report (a report
	// above the capacity would be refused for ever), leaving the bucket
	// empty, not in debt for the outage's refill.
	f.clk.Advance(50 * time.Millisecond)
	if err := s.Sync(context.Background()); err != nil {
		t.Fatalf("report after the outage: %v", err)
	}
	if got := f.remaining(t, b); got != 0 {
		t.Fatalf("the ledger has %d left after the report, want 0", got)
	}
	if st := s.Stats(); st.Reports != 1 || st.ReportedUnits != 10 || st.DebtUnits != 0 {
		t.Fatalf("stats %+v: want one report of the 10 owed, no debt", st)
	}
	f.clk.Advance(time.Second) // refilled: nothing more is owed
	if err := s.Sync(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := f.remaining(t, b); got != 10 {
		t.Fatalf("a second after, the ledger has %d, want 10", got)
	}
	if err := s.Close(context.Background()); err != nil {
		t.Fatalf("Close: %v", err)
	}
}

// switchLedger is a ledger whose Redis can be taken away and given back.
type switchLedger struct {
	localfirst.Ledger
	down atomic.Bool
}

func (l *switchLedger) Take(ctx context.Context, b []quota.Bucket, r []quota.Result) (bool, error) {
	if l.down.Load() {
		return false, context.DeadlineExceeded
	}
	return l.Ledger.Take(ctx, b, r)
}

func (l *switchLedger) Report(ctx context.Context, inst, seq uint64, b []quota.Bucket, res []quota.ReportResult) error {
	if l.down.Load() {
		return context.DeadlineExceeded
	}
	return l.Ledger.Report(ctx, inst, seq, b, res)
}

func (l *switchLedger) Resolve(ctx context.Context, inst, seq uint64, b []quota.Bucket, res []quota.ReportResult) error {
	if l.down.Load() {
		return context.DeadlineExceeded
	}
	return l.Ledger.Resolve(ctx, inst, seq, b, res)
}

// TestHitsBringTheReportForward: Sync, having seen a key far below its
// share, does not look at it again until its report is due; hits that
// bring it near its share move that forward to a quarter interval.
func TestHitsBringTheReportForward(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	s := f.instance(t, 1)
	b := bucket("forward", quota.Async, 10, 1000) // refill negligible here
	read := b
	read.Cost = 0
	take(t, s, read) // a new key: a full share of 1000, nothing spent
	take(t, s, b)    // 1 unit: due after 10s
	f.clk.Advance(10 * time.Millisecond)
	if err := s.Sync(context.Background()); err != nil { // sees it: next look in 10s
		t.Fatal(err)
	}
	for range 500 { // 501 of a share of 1000.1 (0.1 refilled): past half of it
		take(t, s, b)
	}
	f.clk.Advance(12500*time.Microsecond - 10*time.Millisecond) // a quarter interval since the last report
	if err := s.Sync(context.Background()); err != nil {
		t.Fatal(err)
	}
	if st := s.Stats(); st.Reports != 1 || st.ReportedUnits != 501 {
		t.Fatalf("stats %+v: want one report of 501 a quarter interval in", st)
	}
}

// countingLedger counts the ledger's report calls and the reports they
// carry.
type countingLedger struct {
	localfirst.Ledger
	calls, reports atomic.Int64
}

func (l *countingLedger) Report(ctx context.Context, inst, seq uint64, b []quota.Bucket, res []quota.ReportResult) error {
	l.calls.Add(1)
	l.reports.Add(int64(len(b)))
	return l.Ledger.Report(ctx, inst, seq, b, res)
}

// TestReportGroup: the keys due are reported in one call; one of them
// finding no room (another instance drained it) stops no other: it
// charges what the store has and keeps the rest as debt.
func TestReportGroup(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	l := &countingLedger{Ledger: f.ledger}
	s, err := localfirst.New(f.ledger, l, localfirst.WithClock(f.clk), localfirst.WithManualSync(),
		localfirst.WithInstances(func() int { return 1 }))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close(context.Background())
	bs := []quota.Bucket{bucket("g1", quota.Async, 1, 100), bucket("g2", quota.Async, 1, 100), bucket("g3", quota.Async, 1, 100)}
	for _, b := range bs {
		for range 10 {
			take(t, s, b) // 10 of a share of 100 (a new key): far below it
		}
	}
	f.clk.Advance(10 * time.Second)
	if err := s.Sync(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := l.calls.Load(); got != 1 || l.reports.Load() != 3 {
		t.Fatalf("%d ledger report calls of %d reports, want 1 call of 3", got, l.reports.Load())
	}
	for _, b := range bs {
		if got := f.remaining(t, b); got != 90 { // 100 less the 10 reported
			t.Fatalf("%s: ledger has %d, want 90", b.Key, got)
		}
	}
	// Another instance drains g2; this one spends 10 more of each.
	other := bs[1]
	other.Cost = 90 // all it has
	other.Consistency = quota.Exact
	res := make([]quota.Result, 1)
	if ok, err := f.ledger.Take(context.Background(), []quota.Bucket{other}, res); err != nil || !ok {
		t.Fatalf("could not drain g2: %v %v", ok, err)
	}
	for _, b := range bs {
		for range 10 {
			take(t, s, b)
		}
	}
	l.calls.Store(0)
	f.clk.Advance(300 * time.Millisecond) // due (10 of a share of 90: 4.5 intervals); g2 refills 0.3
	if err := s.Sync(context.Background()); err != nil {
		t.Fatal(err)
	}
	// One call: g1 and g3 charged, g2 charged what it has (nothing) and
	// owes the 10 as debt.
	if got := l.calls.Load(); got != 1 {
		t.Fatalf("%d ledger report calls, want 1", got)
	}
	st := s.Stats()
	if st.Reports != 6 || st.ReportedUnits != 50 || st.DebtUnits != 10 {
		t.Fatalf("stats %+v: want 6 reports, 50 units charged, 10 owed", st)
	}
	for i, want := range []int64{80, 0, 80} { // 90 + 0.3 refilled - 10
		if got := f.remaining(t, bs[i]); got != want {
			t.Fatalf("%s: ledger has %d, want %d", bs[i].Key, got, want)
		}
	}
}

// refundCounter counts the ledger's report calls (a Close of leased keys
// makes only returns) and the buckets they carry.
type refundCounter struct {
	localfirst.Ledger
	calls, buckets atomic.Int64
}

func (l *refundCounter) Report(ctx context.Context, inst, seq uint64, b []quota.Bucket, res []quota.ReportResult) error {
	l.calls.Add(1)
	l.buckets.Add(int64(len(b)))
	return l.Ledger.Report(ctx, inst, seq, b, res)
}

// TestCloseReturnsInGroups: Close gives back the leases of 100 keys in
// calls of at most 64 keys (one call for every key could outlast the sync
// timeout and return nothing), and every unit comes back.
func TestCloseReturnsInGroups(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	l := &refundCounter{Ledger: f.ledger}
	s, err := localfirst.New(f.ledger, l, localfirst.WithClock(f.clk), localfirst.WithManualSync(),
		localfirst.WithInstances(func() int { return 1 }))
	if err != nil {
		t.Fatal(err)
	}
	var bs []quota.Bucket
	for i := range 100 {
		b := bucket(fmt.Sprintf("lease-%d", i), quota.Leased, 1, 100)
		bs = append(bs, b)
		for range 4 { // exact; +1 leased; spent from it; +2 leased: 2 units held
			take(t, s, b)
		}
	}
	if err := s.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if c, n := l.calls.Load(), l.buckets.Load(); c != 2 || n != 100 {
		t.Fatalf("%d refund calls of %d buckets, want 2 calls (64 + 36) of 100", c, n)
	}
	for _, b := range bs {
		if got := f.remaining(t, b); got != 96 {
			t.Fatalf("%s: %d left after Close, want 96 (4 spent, the 2 held back)", b.Key, got)
		}
	}
}

// TestFlushReportsEveryHitKeepsLeases: Flush sends the hits whose cadence
// would defer them (a key far below its share waits up to 10s) and keeps a
// live lease; the Store goes on deciding after it.
func TestFlushReportsEveryHitKeepsLeases(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	s := f.instance(t, 1)
	a := bucket("flush-async", quota.Async, 1, 100) // refills 1/s: counts stay exact
	l := bucket("flush-lease", quota.Leased, 1, 100)
	for range 3 {
		if ok, _ := take(t, s, a); !ok {
			t.Fatal("async denied within the share")
		}
	}
	for range 4 { // 1 (exact), 1+1 (lease 1), 1 local, 1+2 (lease 2): 2 held
		if ok, _ := take(t, s, l); !ok {
			t.Fatal("leased denied")
		}
	}
	f.clk.Advance(time.Millisecond)
	if err := s.Sync(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := f.remaining(t, a); got != 100 {
		t.Fatalf("Sync reported a key far below its share: remaining %d, want 100", got)
	}
	if err := s.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := f.remaining(t, a); got != 100-3 {
		t.Fatalf("after Flush the ledger has %d, want 97 (every hit reported)", got)
	}
	if got := f.remaining(t, l); got != 100-6 {
		t.Fatalf("after Flush the lease bucket has %d, want 94 (the live lease kept)", got)
	}
	if st := s.Stats(); st.Reports != 1 || st.ReportedUnits != 3 || st.ReturnedUnits != 0 {
		t.Fatalf("stats %+v, want one report of 3 units and nothing returned", st)
	}
	// The Store decides on after a Flush: the held lease pays two more
	// takes locally, and a new hit reports on Close.
	for range 2 {
		if ok, res := take(t, s, l); !ok || res[0].Source != floodgate.SourceLease {
			t.Fatalf("after Flush a take of the held lease: ok %v source %q", ok, res[0].Source)
		}
	}
	if ok, _ := take(t, s, a); !ok {
		t.Fatal("async denied after Flush")
	}
	if err := s.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := f.remaining(t, a); got != 100-4 {
		t.Fatalf("after Close the ledger has %d, want 96", got)
	}
}

// countingTakes counts the exact store's Take calls.
type countingTakes struct {
	localfirst.Ledger
	takes atomic.Int64
}

func (c *countingTakes) Take(ctx context.Context, b []quota.Bucket, res []quota.Result) (bool, error) {
	c.takes.Add(1)
	return c.Ledger.Take(ctx, b, res)
}

// TestLeasedKeyAtItsLimit: a key asked for ten times faster than it
// refills takes its units a lease at a time, not one store call per unit
// refilled, and still admits every unit the bucket refills: on fake time,
// 1 request a millisecond for 2 s against 100/s (burst 100).
func TestLeasedKeyAtItsLimit(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	exact := &countingTakes{Ledger: f.ledger}
	s, err := localfirst.New(exact, f.ledger, localfirst.WithClock(f.clk), localfirst.WithManualSync())
	if err != nil {
		t.Fatal(err)
	}
	b := bucket("hot", quota.Leased, 100, 100)
	admitted, maxRetry := 0, time.Duration(0)
	for ms := 0; ms < 2000; ms++ {
		ok, res := take(t, s, b)
		if ok {
			admitted++
		} else {
			maxRetry = max(maxRetry, res[0].RetryAfter)
		}
		f.clk.Advance(time.Millisecond)
	}
	if err := s.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	// The bucket held 100 and refilled 100/s for 2 s: what it holds now
	// (the unspent lease given back on Close and the refill since the
	// last take) is all it did not admit.
	left := f.remaining(t, b)
	if int64(admitted)+left != 100+200 {
		t.Fatalf("admitted %d with %d left in the bucket: want 300 in all", admitted, left)
	}
	// What is left is the last wait's gathering, cut short by the end of
	// the run: a deny waits at most a lease target (100 ms: 10 units
	// here) beyond the refill of the request's unit, and the bucket
	// never fills, so no refill is lost on the way.
	if admitted != 291 || left != 9 {
		t.Fatalf("admitted %d (left %d), want 291 (9)", admitted, left)
	}
	if maxRetry > localfirst.DefaultLeaseTarget+10*time.Millisecond {
		t.Fatalf("a deny's retry-after was %s, want at most the lease target and one unit's refill", maxRetry)
	}
	// One store take per unit refilled would be about 200 (262 before
	// denials waited for a lease's worth).
	if n := exact.takes.Load(); n != 74 {
		t.Fatalf("%d store takes, want 74: a lease at a time, one or two takes each", n)
	}
	t.Logf("admitted %d, left %d, %d store takes, longest retry-after %s", admitted, left, exact.takes.Load(), maxRetry)
}

// TestLeaseLengthFollowsHeadroom: a key asked for 5 times a second leases
// for up to half the lease TTL while its bucket is far from empty (a
// store take every few requests), and for the lease target, 100 ms (a
// take every other request, the smallest lease being 1), once the bucket
// is nearly spent, where units held would cost other instances.
func TestLeaseLengthFollowsHeadroom(t *testing.T) {
	t.Parallel()
	run := func(t *testing.T, drain int64) (admitted int, takes int64) {
		f := newFixture(t)
		exact := &countingTakes{Ledger: f.ledger}
		s, err := localfirst.New(exact, f.ledger, localfirst.WithClock(f.clk), localfirst.WithManualSync())
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close(context.Background())
		b := bucket("slow", quota.Leased, 10, 1000)
		if drain > 0 { // another instance spent most of the bucket
			d := b
			d.Consistency, d.Cost = quota.Exact, drain
			if ok, _ := take(t, s, d); !ok {
				t.Fatal("drain denied")
			}
		}
		n0 := exact.takes.Load()
		for range 20 {
			if ok, _ := take(t, s, b); ok {
				admitted++
			}
			f.clk.Advance(200 * time.Millisecond)
		}
		return admitted, exact.takes.Load() - n0
	}
	full, fullTakes := run(t, 0)
	spent, spentTakes := run(t, 950)
	t.Logf("bucket full: %d admitted, %d store takes; nearly spent: %d admitted, %d store takes", full, fullTakes, spent, spentTakes)
	if full != 20 || spent != 20 {
		t.Fatalf("admitted %d and %d of 20, far below the limit", full, spent)
	}
	if fullTakes != 7 || spentTakes != 11 {
		t.Fatalf("store takes %d (full bucket) and %d (nearly spent), want 7 and 11", fullTakes, spentTakes)
	}
}

// TestAsyncLimitChangeKeepsConsumption: an async share whose limit
// changes keeps what it spent, as the store's bucket does (quota.Algorithm,
// "Limit changes"): spent 10 of a burst of 10 and reported (so the share
// comes from the store's answer, not from what is unreported), raised to
// 20, it has the 10 more at once, locally, not a fresh 20; then cut to 5,
// none. On one instance; 12.5 ms pass for the report (0.125 units refill).
func TestAsyncLimitChangeKeepsConsumption(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	s := f.instance(t, 1)
	b := bucket("async-change", quota.Async, 10, 10)
	if n, src := drain(t, s, 100, b); n != 10 || src[floodgate.SourceAsync] != 10 {
		t.Fatalf("admitted %d (%v), want 10 local", n, src)
	}
	f.clk.Advance(12500 * time.Microsecond)
	if err := s.Sync(context.Background()); err != nil {
		t.Fatal(err)
	}
	if st := s.Stats(); st.ReportedUnits != 10 {
		t.Fatalf("reported %d units, want 10", st.ReportedUnits)
	}
	b.Limit.Rate, b.Limit.Burst = 20, 20
	if n, src := drain(t, s, 100, b); n != 10 || src[floodgate.SourceAsync] != 10 {
		t.Fatalf("after the raise to 20: admitted %d (%v), want the 10 more, local", n, src)
	}
	b.Limit.Rate, b.Limit.Burst = 5, 5
	if ok, res := take(t, s, b); ok || res[0].Limit != 5 {
		t.Fatalf("after the cut to 5: %+v, want denied, limit 5", res[0])
	}
}
