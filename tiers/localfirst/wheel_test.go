package localfirst_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate/quota"
	"github.com/floodgate-go/floodgate/tiers/localfirst"
)

// TestReportsComeDueOnTime: keys whose reports fall due from a tenth of a
// second to ten seconds ahead (past the end of the background sync's
// timing wheel), most of them brought forward by hits after a Sync had
// filed them, are each reported at the first Sync at or after their due
// time, to the millisecond, and not before.
func TestReportsComeDueOnTime(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	s := f.instance(t, 1)
	// A share of 1000 that does not refill in the test (1000 an hour):
	// u hits wait share/(2u) × 50ms = 25s/u, at most 10s (maxReportWait).
	hits := []int{1, 2, 4, 5, 10, 50, 125, 250}
	want := map[string]time.Duration{}
	bs := make([]quota.Bucket, len(hits))
	for i, u := range hits {
		bs[i] = bucket(fmt.Sprintf("due%d", u), quota.Async, 1000, 1000)
		bs[i].Limit.Period = time.Hour
		want[bs[i].Key] = min(10*time.Second, 25*time.Second/time.Duration(u))
		read := bs[i]
		read.Cost = 0
		take(t, s, read) // new: a full share of 1000, nothing spent
		take(t, s, bs[i])
	}
	// The first Sync files every key 10s ahead (1 hit each); the hits
	// that follow bring the reports forward.
	if err := s.Sync(context.Background()); err != nil {
		t.Fatal(err)
	}
	for i, u := range hits {
		for range u - 1 {
			take(t, s, bs[i])
		}
	}
	got := map[string]time.Duration{}
	reports := uint64(0)
	for at := time.Millisecond; at <= 11*time.Second; at += time.Millisecond {
		f.clk.Advance(time.Millisecond)
		if err := s.Sync(context.Background()); err != nil {
			t.Fatal(err)
		}
		if st := s.Stats(); st.Reports != reports {
			reports = st.Reports
			for i, u := range hits {
				if _, seen := got[bs[i].Key]; !seen && f.remaining(t, bs[i]) == int64(1000-u) {
					got[bs[i].Key] = at
				}
			}
		}
	}
	for i, u := range hits {
		k := bs[i].Key
		if got[k] != want[k] {
			t.Errorf("%d hits: reported %v after the first Sync, want %v", u, got[k], want[k])
		}
	}
	if reports != uint64(len(hits)) {
		t.Errorf("%d reports, want %d", reports, len(hits))
	}
}

// TestLongLeaseReturnedOnTime: a lease far longer than the sync's timing
// wheel goes back at the first Sync at or after its expiry, whether the
// Syncs come every second or once after a long pause.
func TestLongLeaseReturnedOnTime(t *testing.T) {
	t.Parallel()
	for _, step := range []time.Duration{time.Second, 2 * time.Minute} {
		t.Run(step.String(), func(t *testing.T) {
			f := newFixture(t)
			s := f.instance(t, 1, localfirst.WithLeaseTTL(time.Minute), localfirst.WithLeaseTarget(time.Second))
			b := bucket("long", quota.Leased, 1000, 1000)
			take(t, s, b) // exact: no lease yet
			f.clk.Advance(time.Second)
			take(t, s, b) // leases for its demand: the lease runs a minute from here
			st := s.Stats()
			if st.Leases != 1 || st.LeasedUnits == 0 {
				t.Fatalf("no lease: %+v", st)
			}
			expires := time.Minute
			for at := time.Duration(0); at < expires+step; {
				d := min(step, expires-time.Millisecond-at)
				if d <= 0 {
					d = step
				}
				if at < expires-time.Millisecond && at+d > expires-time.Millisecond {
					d = expires - time.Millisecond - at
				}
				f.clk.Advance(d)
				at += d
				if err := s.Sync(context.Background()); err != nil {
					t.Fatal(err)
				}
				returned := s.Stats().ReturnedUnits
				switch {
				case at < expires && returned != 0:
					t.Fatalf("%d units returned %v into a lease of %v", returned, at, expires)
				case at >= expires && returned != st.LeasedUnits:
					t.Fatalf("%d of %d units returned %v into a lease of %v", returned, st.LeasedUnits, at, expires)
				}
			}
		})
	}
}

// TestReturnedLeaseKeyIsSwept: a key whose lease went back holds nothing,
// so it is dropped once idle like any other key, and a Store that saw many
// such keys does not fill up with them.
func TestReturnedLeaseKeyIsSwept(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	s := f.instance(t, 1, localfirst.WithLeaseTTL(time.Second))
	b := bucket("swept", quota.Leased, 1000, 1000)
	for range 4 {
		take(t, s, b) // exact, then leases 1 and 2
	}
	f.clk.Advance(time.Second)
	if err := s.Sync(context.Background()); err != nil {
		t.Fatal(err)
	}
	if st := s.Stats(); st.ReturnedUnits != 2 || st.Keys != 1 {
		t.Fatalf("after expiry: %+v, want 2 units returned, 1 key", st)
	}
	f.clk.Advance(time.Minute) // past idleFor (30s)
	if err := s.Sync(context.Background()); err != nil {
		t.Fatal(err)
	}
	if st := s.Stats(); st.Keys != 0 {
		t.Fatalf("a returned, idle key was kept: %+v", st)
	}
	if ok, _ := take(t, s, b); !ok {
		t.Fatal("the swept key was denied")
	}

	// With room for 4 keys: 4 leased keys whose leases went back leave
	// room, once idle, for 4 new ones, decided locally.
	s2 := f.instance(t, 1, localfirst.WithLeaseTTL(time.Second), localfirst.WithMaxKeys(4))
	for round := range 2 {
		for k := range 4 {
			b := bucket(fmt.Sprintf("full%d-%d", round, k), quota.Leased, 1000, 1000)
			for range 4 {
				take(t, s2, b)
			}
		}
		f.clk.Advance(time.Second)
		if err := s2.Sync(context.Background()); err != nil {
			t.Fatal(err)
		}
		f.clk.Advance(time.Minute)
		if err := s2.Sync(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	if st := s2.Stats(); st.Overflow != 0 || st.ReturnedUnits != 16 {
		t.Fatalf("%+v: want no key decided exactly for want of room, 16 units returned", st)
	}
}

// TestFullStoreReplacesIdleKeys: at its key bound, a Store replaces keys
// that hold and owe nothing, untouched for a second, with new ones,
// decided locally, wherever the idle keys are; keys that owe a report or
// were just touched are kept, and new keys then go to the exact store.
func TestFullStoreReplacesIdleKeys(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	s := f.instance(t, 1, localfirst.WithMaxKeys(1000))
	for i := range 1000 {
		take(t, s, bucket(fmt.Sprintf("old%d", i), quota.Async, 1000, 1000))
	}
	// Every key owes a report: new keys cannot take their place.
	take(t, s, bucket("refused", quota.Async, 1000, 1000))
	if st := s.Stats(); st.Overflow != 1 || st.Keys != 1000 {
		t.Fatalf("%+v: want 1 overflow, 1000 keys", st)
	}
	if err := s.Flush(context.Background()); err != nil { // report every hit
		t.Fatal(err)
	}
	if err := s.Sync(context.Background()); err != nil { // the reported keys now owe nothing
		t.Fatal(err)
	}
	// Idle, but touched less than a second ago: a Take may be about to
	// spend them, so they stay.
	take(t, s, bucket("early", quota.Async, 1000, 1000))
	if st := s.Stats(); st.Overflow != 2 {
		t.Fatalf("%+v: want a second overflow", st)
	}
	f.clk.Advance(time.Second)
	// 400 new keys for 1000 idle ones: some shards get more new keys than
	// they held idle ones, and find room in others.
	for i := range 400 {
		take(t, s, bucket(fmt.Sprintf("new%d", i), quota.Async, 1000, 1000))
	}
	if st := s.Stats(); st.Overflow != 2 || st.Keys != 1000 || st.LocalAllowed != 1400 {
		t.Fatalf("%+v: want every new key decided locally in place of an idle one", st)
	}
}

// TestConcurrentTakesAndSyncs: takers on 8 goroutines spend async and
// leased keys, alone and together in one take, while another goroutine
// moves the clock and syncs; after Close the ledger has charged each key
// exactly what was admitted on it. A key lost from the sync's wheel would
// keep hits unreported or units unreturned, and show here.
func TestConcurrentTakesAndSyncs(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	s := f.instance(t, 2, localfirst.WithLeaseTTL(50*time.Millisecond), localfirst.WithLeaseTarget(10*time.Millisecond))
	const keys, takers, takes = 24, 8, 3000
	// No refill to speak of (one unit in 1000h) and room for every take.
	bs := make([]quota.Bucket, keys)
	for i := range bs {
		mode := quota.Async
		if i%2 == 1 {
			mode = quota.Leased
		}
		bs[i] = bucket(fmt.Sprintf("conc%d", i), mode, 1, 1_000_000)
		bs[i].Limit.Period = 1000 * time.Hour
	}
	var admitted [keys]atomic.Int64
	done := make(chan struct{})
	var syncs sync.WaitGroup
	syncs.Go(func() {
		for i := 0; ; i++ {
			select {
			case <-done:
				return
			default:
			}
			f.clk.Advance(time.Duration(1+i%17) * time.Millisecond)
			if err := s.Sync(context.Background()); err != nil {
				t.Error(err)
				return
			}
		}
	})
	var wg sync.WaitGroup
	for g := range takers {
		wg.Go(func() {
			res := make([]quota.Result, 2)
			for i := range takes {
				a, b := (g*7+i*5)%keys, (g*11+i*3)%keys
				take := []quota.Bucket{bs[a]}
				if i%3 == 0 && a != b {
					take = append(take, bs[b]) // two levels, all or nothing
				}
				ok, err := s.Take(context.Background(), take, res[:len(take)])
				if err != nil || !ok {
					t.Errorf("take %v: %v %v", take, ok, err)
					return
				}
				admitted[a].Add(1)
				if len(take) == 2 {
					admitted[b].Add(1)
				}
			}
		})
	}
	wg.Wait()
	close(done)
	syncs.Wait()
	if err := s.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	total := int64(0)
	for i := range bs {
		want := 1_000_000 - admitted[i].Load()
		total += admitted[i].Load()
		if got := f.remaining(t, bs[i]); got != want {
			t.Errorf("%s (%s): ledger holds %d, want %d (%d admitted)", bs[i].Key, bs[i].Consistency, got, want, admitted[i].Load())
		}
	}
	if st := s.Stats(); st.Syncs < 10 || st.LocalAllowed == 0 || st.ReturnedUnits == 0 || st.Reports == 0 {
		t.Errorf("the test did not exercise what it is for: %+v", st)
	}
	t.Logf("%d units admitted over %d keys, %+v", total, keys, s.Stats())
}

// TestSyncLagCountsFromTheHit: MaxSyncLag is how long a report waited
// past the moment it fell due: its interval after the last report, or
// the hit that brought it due if later (a key hit again 15s after its
// last report is due at the hit, not late by its idle time; a hit that
// shortens a key's cadence past the time already gone makes it due at
// that hit).
func TestSyncLagCountsFromTheHit(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	s := f.instance(t, 1)
	b := bucket("lag", quota.Async, 1000, 1000)
	b.Limit.Period = 1000 * time.Hour // no refill to speak of: the share stays 1000 less what the store was told
	read := b
	read.Cost = 0
	take(t, s, read) // new: a full share, nothing spent
	take(t, s, b)    // 1 unit: due 10s after the key was new
	sync := func(after time.Duration) {
		t.Helper()
		f.clk.Advance(after)
		if err := s.Sync(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	sync(10*time.Second + 7*time.Millisecond) // 7ms past due
	if st := s.Stats(); st.Reports != 1 || st.MaxSyncLag != 7*time.Millisecond {
		t.Fatalf("%+v: want one report, 7ms late", st)
	}
	sync(15 * time.Second) // idle: nothing due (and not yet swept)
	take(t, s, b)          // due at once (15s since the last report), from now
	sync(4 * time.Millisecond)
	if st := s.Stats(); st.Reports != 2 || st.MaxSyncLag != 7*time.Millisecond {
		t.Fatalf("%+v: want a second report, 4ms after its hit, the longest lag still 7ms", st)
	}
	// A share of 998 now: u units wait 24.95s/u. One hit a second: the
	// fourth waits 6.24s, the fifth, 5s after the last report, 4.99s:
	// due at that hit, not 10ms before it.
	sync(time.Second)
	for range 4 {
		take(t, s, b)
		sync(time.Second)
	}
	if st := s.Stats(); st.Reports != 2 {
		t.Fatalf("%+v: reported before the fifth hit", st)
	}
	take(t, s, b)
	sync(3 * time.Millisecond)
	if st := s.Stats(); st.Reports != 3 || st.MaxSyncLag != 7*time.Millisecond {
		t.Fatalf("%+v: want a third report, 3ms after the hit that made it due, the longest lag still 7ms", st)
	}
}
