package memstore

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate/quota"
	"github.com/floodgate-go/floodgate/testing/clock"
)

// With the hash cut to 2 bits, 40 keys share 4 hashes: colliding entries
// must stay separate buckets, and sweeping and eviction must remove them
// without losing the others.
func TestHashCollisionsKeepBucketsApart(t *testing.T) {
	hashMask = 3
	defer func() { hashMask = ^uint64(0) }()
	clk := clock.New(time.Time{})
	s, err := New(WithClock(clk), WithShards(1), WithMaxKeys(30))
	if err != nil {
		t.Fatal(err)
	}
	fw := quota.Limit{Algorithm: quota.FixedWindow, Rate: 100, Period: time.Hour}
	take := func(key string, cost int64) quota.Result {
		t.Helper()
		var res [1]quota.Result
		if _, err := s.Take(context.Background(), []quota.Bucket{{Key: key, Limit: fw, Cost: cost}}, res[:]); err != nil {
			t.Fatal(err)
		}
		return res[0]
	}
	// Key i is charged i+1 units.
	for i := range 30 {
		take("k"+strconv.Itoa(i), int64(i+1))
	}
	for i := range 30 {
		if r := take("k"+strconv.Itoa(i), 1); r.Remaining != int64(100-i-2) {
			t.Fatalf("k%d: remaining %d, want %d", i, r.Remaining, 100-i-2)
		}
	}
	// Ten more keys into the full shard: each evicts one entry and the
	// count stays at the cap.
	for i := 30; i < 40; i++ {
		take("k"+strconv.Itoa(i), 1)
		if n := s.Len(); n != 30 {
			t.Fatalf("after k%d: Len = %d, want 30", i, n)
		}
	}
	// Every entry left is reachable and counted once.
	live := 0
	for _, sl := range s.shards[0].t.slots {
		if sl.e == nil {
			continue
		}
		live++
		if sl.e.h&^3 != 0 {
			t.Fatalf("entry %q has hash %x", sl.e.key, sl.e.h)
		}
		if s.shards[0].t.get(sl.e.h, sl.e.key) != sl.e {
			t.Fatalf("entry %q is not reachable", sl.e.key)
		}
	}
	if live != 30 || s.shards[0].t.used != 30 {
		t.Fatalf("table holds %d entries, counter says %d, want 30", live, s.shards[0].t.used)
	}
}

// The table against a Go map, through random puts and removes with hashes
// cut to 4 bits (long probe runs, wrapping at the end of the slots): every
// present key is found, every absent one is not, and scans delete exactly
// what they are told to.
func TestTableMatchesMap(t *testing.T) {
	var tb table
	ref := map[string]*entry{}
	seed := uint64(1)
	rnd := func(n int) int {
		seed = seed*6364136223846793005 + 1442695040888963407
		return int((seed >> 33) % uint64(n))
	}
	hashOf := func(k string) uint64 { return uint64(len(k)*7+int(k[len(k)-1])) & 15 }
	check := func(step int) {
		t.Helper()
		if tb.used != len(ref) {
			t.Fatalf("step %d: used %d, want %d", step, tb.used, len(ref))
		}
		for i := range 64 {
			k := "k" + strconv.Itoa(i)
			got := tb.get(hashOf(k), k)
			if got != ref[k] {
				t.Fatalf("step %d: get(%s) = %p, want %p", step, k, got, ref[k])
			}
		}
	}
	for step := range 3000 {
		k := "k" + strconv.Itoa(rnd(64))
		switch e, ok := ref[k]; {
		case !ok:
			e = &entry{h: hashOf(k), key: k}
			tb.put(e)
			ref[k] = e
		case rnd(4) == 0:
			// Delete through a scan: every entry whose key has the same
			// last digit as k, among up to 5 examined.
			last := k[len(k)-1]
			tb.scan(5, func(e *entry) bool {
				if e.key[len(e.key)-1] == last {
					delete(ref, e.key)
					return true
				}
				return false
			})
		default:
			tb.remove(e)
			delete(ref, k)
		}
		check(step)
	}
}
