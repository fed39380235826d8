package localfirst_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate/tiers"
	"github.com/floodgate-go/floodgate/tiers/localfirst"
)

// TestReportsComeDueOnTime: keys whose reports fall due from a tenth of a
// second to ten seconds ahead (past the end of the background sync's
// timing wheel), most of them brought forward by hits after a Sync had
// filed them, are each reported at the first Sync at or after their due
// time, to the millisecond, and not before.
func TestReportsComeDueOnTime(t *testing.T) {
	f := newFixture(t)
	s := f.instance(t, 1)
	// A share of 1000 that does not refill in the test (1000 an hour):
	// u hits wait share/(2u) × 50ms = 25s/u, at most 10s (maxReportWait).
	hits := []int{1, 2, 4, 5, 10, 50, 125, 250}
	want := map[string]time.Duration{}
	bs := make([]tiers.Bucket, len(hits))
	for i, u := range hits {
		bs[i] = bucket(fmt.Sprintf("due%d", u), tiers.Async, 1000, 1000)
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
	for _, step := range []time.Duration{time.Second, 2 * time.Minute} {
		t.Run(step.String(), func(t *testing.T) {
			f := newFixture(t)
			s := f.instance(t, 1, localfirst.WithLeaseTTL(time.Minute), localfirst.WithLeaseTarget(time.Second))
			b := bucket("long", tiers.Leased, 1000, 1000)
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
	f := newFixture(t)
	s := f.instance(t, 1, localfirst.WithLeaseTTL(time.Second))
	b := bucket("swept", tiers.Leased, 1000, 1000)
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
			b := bucket(fmt.Sprintf("full%d-%d", round, k), tiers.Leased, 1000, 1000)
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
// that hold and owe nothing with new ones, decided locally, wherever the
// idle keys are; keys that owe a report are kept, and new keys then go to
// the exact store.
func TestFullStoreReplacesIdleKeys(t *testing.T) {
	f := newFixture(t)
	s := f.instance(t, 1, localfirst.WithMaxKeys(1000))
	for i := range 1000 {
		take(t, s, bucket(fmt.Sprintf("old%d", i), tiers.Async, 1000, 1000))
	}
	// Every key owes a report: new keys cannot take their place.
	take(t, s, bucket("refused", tiers.Async, 1000, 1000))
	if st := s.Stats(); st.Overflow != 1 || st.Keys != 1000 {
		t.Fatalf("%+v: want 1 overflow, 1000 keys", st)
	}
	if err := s.Flush(context.Background()); err != nil { // report every hit
		t.Fatal(err)
	}
	if err := s.Sync(context.Background()); err != nil { // the reported keys now owe nothing
		t.Fatal(err)
	}
	// 400 new keys for 1000 idle ones: some shards get more new keys than
	// they held idle ones, and find room in others.
	for i := range 400 {
		take(t, s, bucket(fmt.Sprintf("new%d", i), tiers.Async, 1000, 1000))
	}
	if st := s.Stats(); st.Overflow != 1 || st.Keys != 1000 || st.LocalAllowed != 1400 {
		t.Fatalf("%+v: want every new key decided locally in place of an idle one", st)
	}
}
