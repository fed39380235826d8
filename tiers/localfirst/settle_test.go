package localfirst_test

import (
	"context"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/quota"
	"github.com/floodgate-go/floodgate/testing/clock"
	"github.com/floodgate-go/floodgate/testing/storetest"
	"github.com/floodgate-go/floodgate/tiers/localfirst"
	"github.com/floodgate-go/floodgate/tiers/memstore"
)

// Exact buckets, waits and settlements pass through to the exact store:
// the Store conforms as its exact store does.
func TestConformanceExact(t *testing.T) {
	t.Parallel()
	storetest.Run(t, func(t *testing.T, clk *clock.Fake) quota.Store {
		m, err := memstore.New(memstore.WithClock(clk))
		if err != nil {
			t.Fatal(err)
		}
		s, err := localfirst.New(m, m, localfirst.WithClock(clk), localfirst.WithManualSync())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = s.Close(context.Background()) })
		return s
	})
}

func settle(t *testing.T, s *localfirst.Store, b quota.Bucket, cost int64, src floodgate.Source) {
	t.Helper()
	b.Cost = cost
	if err := s.Settle(context.Background(), []quota.Bucket{b}, []quota.Result{{Allowed: true, Source: src}}); err != nil {
		t.Fatalf("Settle: %v", err)
	}
}

// A leased bucket settles against its lease: a refund goes into the
// lease (spent locally, never asked of the store again), a charge is paid
// from the lease and what it cannot pay is charged to the store.
func TestSettleLeased(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	s := f.instance(t, 1)
	b := bucket("lease", quota.Leased, 1, 100) // 1/s: no refill worth counting
	if ok, res := take(t, s, b); !ok || (res[0].Source != "" && res[0].Source != floodgate.SourceStore) {
		t.Fatalf("cold take: %v %+v, want decided by the store", ok, res[0])
	}
	if got := f.remaining(t, b); got != 99 {
		t.Fatalf("ledger %d, want 99", got)
	}
	// The request cost 4 more: no lease to pay from, so the store pays.
	settle(t, s, b, 4, floodgate.SourceStore)
	if got := f.remaining(t, b); got != 95 {
		t.Fatalf("after a charge of 4: ledger %d, want 95", got)
	}
	// It cost 3 less than charged: the 3 units go into the lease ...
	settle(t, s, b, -3, floodgate.SourceStore)
	before := s.Stats().LocalAllowed
	for i := range 3 {
		if ok, res := take(t, s, b); !ok || res[0].Source != floodgate.SourceLease {
			t.Fatalf("take %d: %v %+v, want paid by the lease", i, ok, res[0])
		}
	}
	// ... which paid for 3 takes without asking the store.
	if got := f.remaining(t, b); got != 95 || s.Stats().LocalAllowed-before != 3 {
		t.Fatalf("ledger %d (want 95), local admits %d (want 3)", got, s.Stats().LocalAllowed-before)
	}
	// A charge the lease can pay in part: 2 units held, 5 charged.
	settle(t, s, b, -2, floodgate.SourceLease)
	settle(t, s, b, 5, floodgate.SourceLease)
	if got := f.remaining(t, b); got != 92 {
		t.Fatalf("after a charge of 5 on a lease of 2: ledger %d, want 92", got)
	}
}

// An async bucket decided here settles as hits (a charge, reported with
// the others) or a credit against them (a refund), moving the local share
// by the same amount: debt is waited out locally.
func TestSettleAsync(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	s := f.instance(t, 1)
	b := bucket("async", quota.Async, 10, 10)
	if ok, res := take(t, s, b); !ok || res[0].Source != floodgate.SourceAsync {
		t.Fatalf("take: %v %+v", ok, res[0])
	}
	settle(t, s, b, 5, floodgate.SourceAsync) // share 10 - 1 - 5 = 4
	if n, _ := drain(t, s, 100, b); n != 4 {
		t.Fatalf("after a charge of 5: %d admitted, want 4", n)
	}
	f.clk.Advance(12500 * time.Microsecond) // near its share: reported within a quarter interval
	if err := s.Sync(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := f.remaining(t, b); got != 0 {
		t.Fatalf("after the report: ledger %d, want 0 (1 + 5 + 4 reported)", got)
	}
	// A refund of 3: a credit against the next hits, which it pays for.
	settle(t, s, b, -3, floodgate.SourceAsync)
	if n, _ := drain(t, s, 100, b); n != 3 {
		t.Fatalf("after a refund of 3: %d admitted, want 3", n)
	}
	f.clk.Advance(time.Second / 4)
	if err := s.Sync(context.Background()); err != nil {
		t.Fatal(err)
	}
	if st := s.Stats(); st.ReportedUnits != 10 {
		t.Fatalf("reported %d units, want 10: the refunded 3 paid for the next 3 hits", st.ReportedUnits)
	}
	// Debt: 20 more than the share holds is waited out at 10/s.
	f.clk.Advance(time.Hour) // a full share again
	settle(t, s, b, 30, floodgate.SourceAsync)
	if ok, res := take(t, s, b); ok || res[0].RetryAfter != 2100*time.Millisecond {
		t.Fatalf("in debt: %v %+v, want a deny with RetryAfter 2.1s (21 units at 10/s)", ok, res[0])
	}
}

// An async bucket that may wait books its share's units ahead: waits
// queue, and beyond MaxWait the take is denied.
func TestAsyncWait(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	s := f.instance(t, 1)
	b := bucket("async", quota.Async, 10, 10)
	if n, _ := drain(t, s, 100, b); n != 10 {
		t.Fatalf("burst: %d", n)
	}
	b.MaxWait = 300 * time.Millisecond
	for i, want := range []time.Duration{100 * time.Millisecond, 200 * time.Millisecond, 300 * time.Millisecond} {
		if ok, res := take(t, s, b); !ok || res[0].Wait != want || res[0].Source != floodgate.SourceAsync {
			t.Fatalf("waiter %d: %v %+v, want allowed after %v", i, ok, res[0], want)
		}
	}
	if ok, res := take(t, s, b); ok || res[0].Wait != 0 || res[0].RetryAfter != 400*time.Millisecond {
		t.Fatalf("beyond max wait: %v %+v, want a deny with RetryAfter 400ms", ok, res[0])
	}
}
