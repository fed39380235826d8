package redisstore

import (
	"strconv"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate/quota"
)

// BenchmarkDenialCachePutFull measures recording a denial of a new key
// while the cache is full of denials still in force: what each request
// of a flood of distinct over-limit keys costs, under the lock every
// cached take reads through.
func BenchmarkDenialCachePutFull(b *testing.B) {
	d := newDenialCache(defaultDenialCacheSize)
	now := time.Unix(1_700_000_000, 0)
	lim := quota.Limit{Algorithm: quota.TokenBucket, Rate: 1, Period: time.Second, Burst: 1}
	live := cacheEntry{until: now.Add(time.Hour), cost: 1}
	for i := range defaultDenialCacheSize {
		d.put(cacheKey{key: "held" + strconv.Itoa(i), lim: lim}, live, now)
	}
	b.ReportAllocs()
	b.ResetTimer()
	i := 0
	for b.Loop() {
		d.put(cacheKey{key: "new" + strconv.Itoa(i), lim: lim}, live, now) // never seen
		i++
	}
	b.StopTimer()
	if n := d.len(); n != defaultDenialCacheSize {
		b.Fatalf("cache holds %d, want %d", n, defaultDenialCacheSize)
	}
}

// TestDenialCacheFull: a full cache makes room for a new denial by
// dropping the denials that ended, or else the one that ends first.
func TestDenialCacheFull(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	lim := quota.Limit{Algorithm: quota.TokenBucket, Rate: 1, Period: time.Second, Burst: 1}
	key := func(s string) cacheKey { return cacheKey{key: s, lim: lim} }
	at := func(d time.Duration) cacheEntry { return cacheEntry{until: now.Add(d), cost: 1} }

	d := newDenialCache(4)
	d.put(key("a"), at(-time.Second), now.Add(-2*time.Second)) // ended by now
	d.put(key("b"), at(3*time.Second), now)
	d.put(key("c"), at(-time.Millisecond), now.Add(-time.Second)) // ended by now
	d.put(key("d"), at(time.Second), now)
	d.put(key("e"), at(2*time.Second), now)
	if _, ok := d.m[key("a")]; ok || d.len() != 3 {
		t.Fatalf("after e: %v, want a and c (ended) dropped, b d e kept", d.m)
	}
	d.put(key("f"), at(4*time.Second), now)
	d.put(key("g"), at(5*time.Second), now) // full of live denials: d ends first
	for _, k := range []string{"b", "e", "f", "g"} {
		if _, ok := d.m[key(k)]; !ok {
			t.Fatalf("%s dropped: %v", k, d.m)
		}
	}
	if d.len() != 4 {
		t.Fatalf("holds %d, want 4", d.len())
	}
	d.put(key("b"), at(time.Minute), now) // a key held: updated in place
	if d.len() != 4 || d.m[key("b")].until != now.Add(time.Minute) {
		t.Fatalf("b not updated in place: %v", d.m)
	}
}

// TestDenialCacheSkipsLiftedDenials: a denial decided before units were
// given back (a Settle or a Report of a negative cost) and brought back after is not
// recorded: the units may have lifted it.
func TestDenialCacheSkipsLiftedDenials(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	lim := quota.Limit{Algorithm: quota.TokenBucket, Rate: 1, Period: time.Hour, Burst: 2}
	b := []quota.Bucket{{Key: "k", Limit: lim, Cost: 2, CacheDenials: true}}
	denied := []quota.Result{{Allowed: false, RetryAfter: time.Hour}}
	d := newDenialCache(10)
	gen := d.gen.Load() // the take is sent
	back := []quota.Bucket{{Key: "k", Limit: lim, Cost: -2, CacheDenials: true}}
	d.liftDenials(back) // units given back while it is under way
	d.record(now, gen, b, denied)
	if d.len() != 0 {
		t.Fatal("a denial decided before units were given back was recorded")
	}
	d.record(now, d.gen.Load(), b, denied) // a take sent after: recorded
	if d.len() != 1 {
		t.Fatal("a denial decided after was not recorded")
	}
}

// TestDenialCacheCountsFromTheSend: a denial is kept for its retry-after
// from when its take was sent, so a slow reply never keeps it past the
// moment Redis would admit again.
func TestDenialCacheCountsFromTheSend(t *testing.T) {
	sent := time.Unix(1_700_000_000, 0)
	lim := quota.Limit{Algorithm: quota.GCRA, Rate: 1, Period: time.Second, Burst: 1}
	b := []quota.Bucket{{Key: "k", Limit: lim, Cost: 1, CacheDenials: true}}
	d := newDenialCache(10)
	d.record(sent, d.gen.Load(), b, []quota.Result{{Allowed: false, RetryAfter: time.Second}})
	res := make([]quota.Result, 1)
	if !d.answer(sent.Add(999*time.Millisecond), b, res) {
		t.Fatal("not answered within the retry-after")
	}
	if d.answer(sent.Add(time.Second), b, res) {
		t.Fatal("answered at the retry-after counted from the send")
	}
}
