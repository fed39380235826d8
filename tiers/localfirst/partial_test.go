package localfirst_test

import (
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/quota"
)

func atMost(b quota.Bucket, most int64) quota.Bucket {
	b.Cost, b.AtMost = most, true
	return b
}

// An async bucket grants from this instance's share: of capacity 10 over
// 2 instances, a key new here holds 5; at most 8 is granted 5, locally;
// then nothing is left and one unit is denied locally, its wait the
// share's refill of one unit (rate 10/s over 2 instances: 200 ms).
func TestAtMostAsyncFromShare(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	s := f.instance(t, 2)
	b := bucket("async", quota.Async, 10, 10)
	ok, res := take(t, s, atMost(b, 8))
	if !ok || res[0].Granted != 5 || res[0].Source != floodgate.SourceAsync || res[0].Remaining != 0 {
		t.Fatalf("first: %v %+v, want 5 granted from the share", ok, res[0])
	}
	ok, res = take(t, s, atMost(b, 8))
	if ok || res[0].Granted != 0 || res[0].RetryAfter != 200*time.Millisecond {
		t.Fatalf("second: %v %+v, want denied for 200ms", ok, res[0])
	}
	if got := f.remaining(t, b); got != 10 {
		t.Fatalf("ledger %d, want 10: async admits are reported at sync", got)
	}
	// 600 ms later the share has refilled 3 (10/s over 2): granted 3.
	f.clk.Advance(600 * time.Millisecond)
	if ok, res = take(t, s, atMost(b, 8)); !ok || res[0].Granted != 3 {
		t.Fatalf("after 600ms: %v %+v, want 3 granted", ok, res[0])
	}
}

// A leased bucket grants what its lease holds, locally; without a lease
// the store decides, and a store that holds less than asked grants what
// it holds (the take is asked again at that).
func TestAtMostLeased(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	s := f.instance(t, 1)
	b := bucket("lease", quota.Leased, 1, 100) // 1/s: no refill worth counting
	// Cold: no lease, the store grants all 30.
	ok, res := take(t, s, atMost(b, 30))
	if !ok || res[0].Granted != 30 || f.remaining(t, b) != 70 {
		t.Fatalf("cold: %v %+v ledger %d, want 30 granted by the store, 70 left", ok, res[0], f.remaining(t, b))
	}
	// Warm the key until it holds a lease.
	for i := 0; i < 20; i++ {
		f.clk.Advance(10 * time.Millisecond)
		take(t, s, b)
	}
	before := f.remaining(t, b)
	ok, res = take(t, s, atMost(b, 1000))
	if !ok || res[0].Source != floodgate.SourceLease || res[0].Granted < 1 || f.remaining(t, b) != before {
		t.Fatalf("leased: %v %+v, ledger %d (was %d), want a grant from the lease, the ledger untouched", ok, res[0], f.remaining(t, b), before)
	}
	// What the lease held: the 70 units the cold take left, less the 20
	// admitted warming up, less what the store still holds.
	held := res[0].Granted
	if held != 70-20-before {
		t.Fatalf("granted %d from the lease, want all it held, %d", held, 70-20-before)
	}
	// The lease is spent: the store holds before units; at most 1000 is
	// granted all of them.
	ok, res = take(t, s, atMost(b, 1000))
	if !ok || res[0].Granted != before || f.remaining(t, b) != 0 {
		t.Fatalf("after the lease (%d): %v %+v, ledger %d, want the store's %d granted", held, ok, res[0], f.remaining(t, b), before)
	}
	if ok, res = take(t, s, atMost(b, 5)); ok || res[0].Granted != 0 {
		t.Fatalf("empty: %v %+v, want denied", ok, res[0])
	}
}
