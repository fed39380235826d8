package redisstore

import (
	"context"
	"encoding/binary"
	"errors"
	"math"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/floodgate-go/floodgate/quota"
	"github.com/floodgate-go/floodgate/testing/clock"
	"github.com/floodgate-go/floodgate/testing/redistest"
	"github.com/floodgate-go/floodgate/tiers/memstore"
)

// SmallLimits is one small limit per algorithm, so random traces deny
// often; the external differential tests use it too.
var SmallLimits = []quota.Limit{
	{Algorithm: quota.TokenBucket, Rate: 5, Period: time.Second, Burst: 4},
	{Algorithm: quota.GCRA, Rate: 3, Period: 700 * time.Millisecond, Burst: 3},
	{Algorithm: quota.SlidingWindowCounter, Rate: 6, Period: 900 * time.Millisecond},
	{Algorithm: quota.SlidingWindowLog, Rate: 4, Period: 800 * time.Millisecond},
	{Algorithm: quota.FixedWindow, Rate: 5, Period: 600 * time.Millisecond},
}

// ChangedLimits is SmallLimits with each limit changed (rate, burst and
// period; the log's rate only: a log's window change counts what its key
// still holds, which its TTL decides), so that traces which switch a key
// between the two check how a state written under one limit reads under
// the other (quota.Algorithm's "Limit changes") in both stores.
var ChangedLimits = []quota.Limit{
	{Algorithm: quota.TokenBucket, Rate: 3, Period: 700 * time.Millisecond, Burst: 7},
	{Algorithm: quota.GCRA, Rate: 5, Period: time.Second, Burst: 2},
	{Algorithm: quota.SlidingWindowCounter, Rate: 4, Period: 1300 * time.Millisecond},
	{Algorithm: quota.SlidingWindowLog, Rate: 6, Period: 800 * time.Millisecond},
	{Algorithm: quota.FixedWindow, Rate: 3, Period: 400 * time.Millisecond},
}

// newStore starts a redis-server and returns a store on it (Redis time, no
// denial cache, opts after) and a client of the server.
func newStore(t *testing.T, opts ...Option) (*Store, *redis.Client) {
	t.Helper()
	c := redistest.Start(t).Client()
	s, err := New(c, append([]Option{WithDenialCache(0)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s, c
}

// flushTakes sends takes through one flush of a batcher's flusher, as if
// they had queued together, and returns them in the order Redis decided
// them: the merged call's takes, then those sent alone.
func flushTakes(t *testing.T, s *Store, f *flusher, takes [][]quota.Bucket, pre ...bool) []*pending {
	t.Helper()
	f.batch = f.batch[:0]
	for _, bs := range takes {
		c := new(call)
		if s.clock != nil {
			c.now, c.fixed = s.clock.Now().UnixMicro(), true
		}
		p := len(pre) > 0 && pre[0]
		c.build(takeScript, s.prefix, bs, nil, p, s.minArg, s.cluster != nil)
		if p {
			c.kind = kindPre
		}
		if s.cluster != nil {
			c.slot = s.slotOf(bs[0].Key)
		}
		f.batch = append(f.batch, &pending{c: c, done: make(chan struct{}, 1)})
	}
	f.flush()
	order := append(append([]*pending(nil), f.merged...), f.alone...)
	if len(order) != len(takes) {
		t.Fatalf("flush decided %d takes of %d", len(order), len(takes))
	}
	return order
}

// TestMergedCallsMatchSequentialTakes: a random trace of batches (1 to 8
// takes each, over shared keys of every algorithm, costs 0..3 and some
// above capacity), flushed as merged take.lua calls, decides every take
// exactly as memstore does when it takes them one after another in the
// order Redis ran them. Takes with a sliding window log bucket are sent
// alone; the others share one call, and later takes in it must see what
// earlier ones charged.
func TestMergedCallsMatchSequentialTakes(t *testing.T) {
	t.Parallel()
	clk := clock.New(time.Time{})
	s, _ := newStore(t, WithClock(clk), WithMinTTL(time.Minute))
	ms, err := memstore.New(memstore.WithClock(clk))
	if err != nil {
		t.Fatal(err)
	}
	f := newFlusher(s.client, s.keyPos(), 64)
	rng := rand.New(rand.NewPCG(7, 11))
	keys := []string{"m:tb", "m:gcra", "m:swc", "m:swl", "m:fw"}
	ctx := context.Background()
	var allowed, denied, merged, maxMerged, shared int
	for step := 0; step < 150; step++ {
		clk.Advance(time.Duration(rng.IntN(150_000)) * time.Microsecond)
		var takes [][]quota.Bucket
		for n := 1 + rng.IntN(8); len(takes) < n; {
			var bs []quota.Bucket
			for i, k := range keys {
				// the log rarely, so most batches merge
				if rng.IntN(3) == 0 || (i == 3 && rng.IntN(4) != 0) {
					continue
				}
				cost := int64(rng.IntN(4))
				if rng.IntN(40) == 0 {
					cost = 50 // above every capacity
				}
				bs = append(bs, quota.Bucket{Key: k, Limit: SmallLimits[i], Cost: cost})
			}
			if len(bs) > 0 {
				takes = append(takes, bs)
			}
		}
		seen := map[string]int{}
		for _, bs := range takes {
			for _, b := range bs {
				seen[b.Key]++
			}
		}
		for _, c := range seen {
			if c > 1 {
				shared++
			}
		}
		order := flushTakes(t, s, f, takes)
		merged += len(f.merged)
		maxMerged = max(maxMerged, len(f.merged))
		for j, p := range order {
			bs := takeOf(t, s, takes, p)
			want := make([]quota.Result, len(bs))
			wok, err := ms.Take(ctx, bs, want)
			if err != nil {
				t.Fatalf("memstore: %v", err)
			}
			if p.err != nil {
				t.Fatalf("step %d take %d: %v", step, j, p.err)
			}
			if p.now != clk.Now().UnixMicro() {
				t.Fatalf("step %d take %d: script time %d, want %d", step, j, p.now, clk.Now().UnixMicro())
			}
			per, err := takePart(p.seg, len(bs), false)
			if err != nil {
				t.Fatalf("step %d take %d: %v", step, j, err)
			}
			if gok := p.seg[0] == 1; gok != wok {
				t.Fatalf("step %d take %d of %d (%d merged): charged %v, memstore %v", step, j, len(order), len(f.merged), gok, wok)
			}
			for i := range bs {
				b := bucketAt(p.seg, per, i)
				g := quota.Result{Allowed: b.allowed, Limit: bs[i].Limit.Capacity(), Remaining: b.remaining, Reset: usec(b.reset), RetryAfter: usec(b.retry)}
				if b.retry < 0 {
					g.RetryAfter = quota.Never
				}
				w := want[i]
				w.Source = ""
				if g != w {
					t.Fatalf("step %d take %d of %d (%d merged) bucket %s cost %d:\n got  %+v\n want %+v", step, j, len(order), len(f.merged), bs[i].Key, bs[i].Cost, g, w)
				}
			}
			if wok {
				allowed++
			} else {
				denied++
			}
		}
	}
	t.Logf("%d takes allowed, %d denied; %d decided in merged calls (at most %d in one); %d keys shared within a batch", allowed, denied, merged, maxMerged, shared)
	if allowed < 50 || denied < 50 || merged < 300 || maxMerged < 6 || shared < 100 {
		t.Fatalf("trace too weak to prove much: %d allowed, %d denied, %d merged (max %d), %d shared keys", allowed, denied, merged, maxMerged, shared)
	}
}

// takeOf finds the buckets of the take p was built from.
func takeOf(t *testing.T, s *Store, takes [][]quota.Bucket, p *pending) []quota.Bucket {
	t.Helper()
	for _, bs := range takes {
		if len(bs) == p.c.n && string(p.c.bufs[1].b) == s.prefix+bs[0].Key && sameTake(s.prefix, p.c, bs) {
			return bs
		}
	}
	t.Fatal("a decided take matches none sent")
	return nil
}

// sameTake reports whether call c is the take of bs, its keys under
// prefix.
func sameTake(prefix string, c *call, bs []quota.Bucket) bool {
	for i, b := range bs {
		l := c.bufs[c.lim].b[8+33*i:]
		if string(c.bufs[1+i].b) != prefix+b.Key || math.Float64frombits(binary.LittleEndian.Uint64(l[25:])) != float64(b.Cost) {
			return false
		}
	}
	return true
}

// TestMergedCallRefusedChargesNothing: a merged call that Redis refuses
// (here for lack of memory, at its first write) fails every take of it
// with Redis's error and charges none of them.
func TestMergedCallRefusedChargesNothing(t *testing.T) {
	t.Parallel()
	s, c := newStore(t) // Redis time, defaultMinTTL
	ctx := context.Background()
	l := quota.Limit{Algorithm: quota.TokenBucket, Rate: 10, Period: time.Second, Burst: 10}
	takes := [][]quota.Bucket{
		{{Key: "r:tenant", Limit: l, Cost: 1}, {Key: "r:a", Limit: l, Cost: 1}},
		{{Key: "r:tenant", Limit: l, Cost: 1}, {Key: "r:b", Limit: l, Cost: 1}},
		{{Key: "r:tenant", Limit: l, Cost: 1}, {Key: "r:c", Limit: l, Cost: 1}},
	}
	if err := c.ConfigSet(ctx, "maxmemory-policy", "noeviction").Err(); err != nil {
		t.Fatal(err)
	}
	if err := c.ConfigSet(ctx, "maxmemory", "1").Err(); err != nil {
		t.Fatal(err)
	}
	f := newFlusher(s.client, s.keyPos(), 64)
	order := flushTakes(t, s, f, takes)
	if err := c.ConfigSet(ctx, "maxmemory", "0").Err(); err != nil {
		t.Fatal(err)
	}
	if len(f.merged) != 3 {
		t.Fatalf("%d takes merged, want 3", len(f.merged))
	}
	for _, p := range order {
		if p.err == nil || !strings.Contains(p.err.Error(), "OOM") {
			t.Fatalf("take %s on a full Redis: %v, want Redis's OOM error", p.c.bufs[2].b, p.err)
		}
	}
	n, err := c.Exists(ctx, "r:tenant", "r:a", "r:b", "r:c").Result()
	if err != nil || n != 0 {
		t.Fatalf("%d of the refused call's keys exist (%v), want none", n, err)
	}
}

// TestMergedCallNetworkErrorFailsEveryTake: a merged call that never got
// an answer fails every take of it with that error, and sends nothing
// again.
func TestMergedCallNetworkErrorFailsEveryTake(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	s, err := New(srv.NewClient(), WithDenialCache(0))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	srv.Kill()
	l := quota.Limit{Algorithm: quota.GCRA, Rate: 10, Period: time.Second, Burst: 10}
	takes := [][]quota.Bucket{{{Key: "n:a", Limit: l, Cost: 1}}, {{Key: "n:b", Limit: l, Cost: 1}}}
	order := flushTakes(t, s, newFlusher(s.client, s.keyPos(), 64), takes)
	for _, p := range order {
		var rerr interface{ RedisError() }
		if p.err == nil || errors.As(p.err, &rerr) {
			t.Fatalf("take on a killed Redis: %v, want a connection error", p.err)
		}
	}
}

// TestTakeReplacesKeyOfAnotherType: a state key that holds another type
// (not written by take.lua) reads as absent and is replaced by the state,
// alone and in a merged call (plain SET replaces it; SET ... GET, which
// take.lua used before, refused it).
func TestTakeReplacesKeyOfAnotherType(t *testing.T) {
	t.Parallel()
	s, c := newStore(t) // Redis time, defaultMinTTL
	ctx := context.Background()
	l := quota.Limit{Algorithm: quota.TokenBucket, Rate: 10, Period: time.Hour, Burst: 10}
	for _, k := range []string{"w:alone", "w:merged"} {
		if err := c.HSet(ctx, k, "f", "v").Err(); err != nil {
			t.Fatal(err)
		}
	}
	var res [1]quota.Result
	if ok, err := s.Take(ctx, []quota.Bucket{{Key: "w:alone", Limit: l, Cost: 3}}, res[:]); err != nil || !ok || res[0].Remaining != 7 {
		t.Fatalf("take over a hash: %v %v %+v, want allowed with 7 remaining", ok, err, res[0])
	}
	order := flushTakes(t, s, newFlusher(s.client, s.keyPos(), 64), [][]quota.Bucket{
		{{Key: "w:merged", Limit: l, Cost: 2}},
		{{Key: "w:merged", Limit: l, Cost: 4}},
	})
	for _, p := range order {
		if p.err != nil || p.seg[0] != 1 {
			t.Fatalf("merged take over a hash: %v %v, want charged", p.err, p.seg)
		}
	}
	if got := bucketAt(order[1].seg, 2, 0).remaining; got != 4 {
		t.Fatalf("second merged take left %d, want 4 (10 - 2 - 4)", got)
	}
	for _, k := range []string{"w:alone", "w:merged"} {
		if typ := c.Type(ctx, k).Val(); typ != "string" {
			t.Fatalf("%s is a %s after the take, want the state string", k, typ)
		}
	}
	if ok, err := s.Take(ctx, []quota.Bucket{{Key: "w:merged", Limit: l, Cost: 5}}, res[:]); err != nil || ok {
		t.Fatalf("take of 5 after 6 of 10 were charged: %v %v, want denied", ok, err)
	}
}

// TestDeadlineKeepsTTL: with Redis time, a key's TTL is set to a deadline
// min TTL beyond what its state needs; writes that deadline covers keep the
// TTL, and a write needing longer moves it, also when a later take of the
// same merged call keeps it.
//
// The key's deadline is read as Redis keeps it, PEXPIRETIME (an absolute
// time: kept means unchanged), and the TTL it was set with is bracketed by
// Redis TIME read before the take and after: between deadline - after and
// deadline - before. Each bound is checked on the side of the bracket it
// cannot miss, so a busy machine, which only widens the bracket, fails
// none.
func TestDeadlineKeepsTTL(t *testing.T) {
	t.Parallel()
	s, c := newStore(t) // Redis time, defaultMinTTL
	ctx := context.Background()
	now := func() time.Time { t.Helper(); return redisNow(t, c) }
	deadline := func(k string) time.Time { t.Helper(); return time.UnixMilli(pexpireTime(t, c, k)) }
	// setWithin fails t unless the deadline of k, set by a write between
	// before and after, is a TTL that may lie in [lo, hi].
	setWithin := func(k string, before, after time.Time, lo, hi time.Duration) time.Time {
		t.Helper()
		d := deadline(k)
		if d.Sub(before) < lo || d.Sub(after) > hi {
			t.Fatalf("%s: deadline %s after a write between %s and %s: a TTL of %s to %s, want within [%s, %s]",
				k, d.Format(time.StampMilli), before.Format(time.StampMilli), after.Format(time.StampMilli), d.Sub(after), d.Sub(before), lo, hi)
		}
		return d
	}
	// 10/s, burst 100: a cost of 1 needs 100 ms to refill, below the
	// 1 s floor; a cost of 90 needs 9 s.
	l := quota.Limit{Algorithm: quota.TokenBucket, Rate: 10, Period: time.Second, Burst: 100}
	var res [1]quota.Result
	take := func(k string, cost int64) {
		t.Helper()
		if ok, err := s.Take(ctx, []quota.Bucket{{Key: k, Limit: l, Cost: cost}}, res[:]); err != nil || !ok {
			t.Fatalf("take %s cost %d: %v %v", k, cost, ok, err)
		}
	}
	t0 := now()
	take("d:a", 1)
	// floor 1 s plus 1 s of slack
	first := setWithin("d:a", t0, now(), defaultMinTTL+time.Millisecond, 2*defaultMinTTL)
	// A later write (Redis's clock has moved on: set again, the deadline
	// would move) that the deadline covers keeps it.
	WaitFor(t, "Redis's clock past the first take", func() bool { return now().Sub(t0) > 5*time.Millisecond })
	take("d:a", 1)
	if d := deadline("d:a"); !d.Equal(first) {
		t.Fatalf("deadline after a covered take %s, after the first %s: want it kept", d.Format(time.StampMilli), first.Format(time.StampMilli))
	}
	t1 := now()
	take("d:a", 90)
	setWithin("d:a", t1, now(), 9*time.Second, 11*time.Second)

	// Merged: the first take moves the deadline, the second (covered by
	// the moved one) keeps it; the key must get the moved deadline.
	take("d:m", 1)
	f := newFlusher(s.client, s.keyPos(), 64)
	t2 := now()
	order := flushTakes(t, s, f, [][]quota.Bucket{
		{{Key: "d:m", Limit: l, Cost: 90}},
		{{Key: "d:m", Limit: l, Cost: 1}},
	})
	t3 := now()
	if len(f.merged) != 2 {
		t.Fatalf("%d takes merged, want 2", len(f.merged))
	}
	for _, p := range order {
		if p.err != nil || p.seg[0] != 1 {
			t.Fatalf("merged take: %v %v", p.err, p.seg)
		}
	}
	setWithin("d:m", t2, t3, 9*time.Second, 11*time.Second)
}

// TestMergedGCRAFastRate: a GCRA whose emission interval is below a
// microsecond (10^6 per ms) in a merged call: the second take sees what
// the first charged, as it would in its own call (memstore, one after the
// other, is the reference).
func TestMergedGCRAFastRate(t *testing.T) {
	t.Parallel()
	clk := clock.New(time.Time{})
	s, _ := newStore(t, WithClock(clk), WithMinTTL(time.Minute))
	ms, err := memstore.New(memstore.WithClock(clk))
	if err != nil {
		t.Fatal(err)
	}
	l := quota.Limit{Algorithm: quota.GCRA, Rate: 1_000_000, Period: time.Millisecond, Burst: 1000}
	takes := [][]quota.Bucket{
		{{Key: "g:fast", Limit: l, Cost: 600}},
		{{Key: "g:fast", Limit: l, Cost: 600}},
	}
	f := newFlusher(s.client, s.keyPos(), 64)
	flushTakes(t, s, f, takes)
	if len(f.merged) != 2 {
		t.Fatalf("%d takes merged, want 2", len(f.merged))
	}
	for j, p := range f.merged {
		var want [1]quota.Result
		wok, err := ms.Take(context.Background(), takes[j], want[:])
		if err != nil {
			t.Fatal(err)
		}
		per, err := takePart(p.seg, 1, false)
		if err != nil {
			t.Fatal(err)
		}
		got := bucketAt(p.seg, per, 0)
		if (p.seg[0] == 1) != wok || got.remaining != want[0].Remaining {
			t.Fatalf("take %d: charged %v remaining %d, memstore %v remaining %d", j, p.seg[0] == 1, got.remaining, wok, want[0].Remaining)
		}
	}
}

// TestMergedCallsPerSlotCluster: on a cluster a flush merges the takes of
// each node into one call of its own (take.lua for one slot, nodeScript
// for several slots of the node), sends every call in one pipeline, and
// every take is decided exactly as memstore decides it taking them one
// after another in the order Redis ran them (takes of different slots
// share no key, so only each slot's order matters). Two of the three tags
// share a node, so calls of several slots are made.
//
// On the shared cluster, under the test's own prefix.
func TestMergedCallsPerSlotCluster(t *testing.T) {
	t.Parallel()
	c, prefix := SharedCluster(t)
	clk := clock.New(time.Time{})
	s, err := New(c, WithClock(clk), WithMinTTL(time.Minute), WithDenialCache(0), WithPrefix(prefix))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	ms, err := memstore.New(memstore.WithClock(clk))
	if err != nil {
		t.Fatal(err)
	}
	tags := sharedNodeTags(t, c)
	slots := map[int]bool{}
	for _, tag := range tags {
		slots[Slot(tag)] = true
	}
	if len(slots) != 3 {
		t.Fatalf("tags share slots: %v", slots)
	}
	for _, pre := range []bool{false, true} {
		mergedPerNode(t, s, ms, clk, tags, pre)
	}
}

// mergedPerNode is TestMergedCallsPerSlotCluster's trace of takes, or
// (pre) of parts of multi-slot takes (mode "p", which also report each
// bucket's states).
func mergedPerNode(t *testing.T, s *Store, ms *memstore.Store, clk *clock.Fake, tags []string, pre bool) {
	f := newFlusher(s.client, s.keyPos(), 64)
	rng := rand.New(rand.NewPCG(3, 5))
	algs := []string{"tb", "gcra", "swc", "swl", "fw"}
	if pre {
		algs = []string{"ptb", "pgcra", "pswc", "pswl", "pfw"}
	}
	ctx := context.Background()
	var allowed, denied, multi, nodeCalls int
	for step := 0; step < 80; step++ {
		clk.Advance(time.Duration(rng.IntN(150_000)) * time.Microsecond)
		var takes [][]quota.Bucket
		for n := 2 + rng.IntN(10); len(takes) < n; {
			tag := tags[rng.IntN(len(tags))]
			var bs []quota.Bucket
			for i, a := range algs {
				if rng.IntN(3) == 0 || (i == 3 && rng.IntN(4) != 0) {
					continue
				}
				bs = append(bs, quota.Bucket{Key: tag + a, Limit: SmallLimits[i], Cost: int64(rng.IntN(4))})
			}
			if len(bs) > 0 {
				takes = append(takes, bs)
			}
		}
		order := flushTakes(t, s, f, takes, pre)
		if len(f.groups) > 1 {
			multi++
		}
		for _, g := range f.groups {
			n0, _ := f.nodeOf(f.merged[g.start])
			mixed := false
			for _, p := range f.merged[g.start:g.end] {
				if n, _ := f.nodeOf(p); n != n0 {
					t.Fatalf("step %d: a merged call mixes nodes %d and %d", step, n0, n)
				}
				mixed = mixed || p.c.slot != f.merged[g.start].c.slot
			}
			if mixed != g.node {
				t.Fatalf("step %d: a merged call of several slots %v, run as nodeScript %v", step, mixed, g.node)
			}
			if g.node {
				nodeCalls++
			}
		}
		for j, p := range order {
			bs := takeOf(t, s, takes, p)
			want := make([]quota.Result, len(bs))
			wok, err := ms.Take(ctx, bs, want)
			if err != nil {
				t.Fatalf("memstore: %v", err)
			}
			if p.err != nil {
				t.Fatalf("step %d take %d: %v", step, j, p.err)
			}
			per, err := takePart(p.seg, len(bs), pre)
			if err != nil {
				t.Fatalf("step %d take %d: %v", step, j, err)
			}
			if pre && (len(p.seg) != 1+6*len(bs) || len(p.c.st) < 2*len(bs)) {
				t.Fatalf("step %d take %d: %d values and %d of states in mode p for %d buckets", step, j, len(p.seg), len(p.c.st), len(bs))
			}
			if gok := p.seg[0] == 1; gok != wok {
				t.Fatalf("step %d take %d: charged %v, memstore %v", step, j, gok, wok)
			}
			for i := range bs {
				b := bucketAt(p.seg, per, i)
				g := quota.Result{Allowed: b.allowed, Limit: bs[i].Limit.Capacity(), Remaining: b.remaining, Reset: usec(b.reset), RetryAfter: usec(b.retry)}
				if b.retry < 0 {
					g.RetryAfter = quota.Never
				}
				w := want[i]
				w.Source = ""
				if g != w {
					t.Fatalf("step %d take %d bucket %s cost %d:\n got  %+v\n want %+v", step, j, bs[i].Key, bs[i].Cost, g, w)
				}
			}
			if wok {
				allowed++
			} else {
				denied++
			}
		}
	}
	t.Logf("pre %v: %d allowed, %d denied; %d flushes sent several merged calls; %d calls of several slots", pre, allowed, denied, multi, nodeCalls)
	if allowed < 50 || denied < 50 || multi < 20 || nodeCalls < 20 {
		t.Fatalf("trace too weak: %d allowed, %d denied, %d flushes with several merged calls, %d calls of several slots", allowed, denied, multi, nodeCalls)
	}
}

// sharedNodeTags returns three hash tags in three slots, the first two
// served by one master of c, the third by another.
func sharedNodeTags(t *testing.T, c *redis.ClusterClient) []string {
	t.Helper()
	ctx := context.Background()
	addr := func(tag string) string {
		m, err := c.MasterForKey(ctx, tag)
		if err != nil {
			t.Fatal(err)
		}
		return m.Options().Addr
	}
	byNode := map[string][]string{}
	for i := 0; i < 64; i++ {
		tag := "{ps=" + string(rune('a'+i%26)) + string(rune('a'+i/26)) + "}"
		a := addr(tag)
		byNode[a] = append(byNode[a], tag)
	}
	var out []string
	for _, tags := range byNode {
		if len(tags) >= 2 && len(out) == 0 {
			out = append(out, tags[0], tags[1])
		}
	}
	for a, tags := range byNode {
		if len(out) == 2 && a != addr(out[0]) {
			out = append(out, tags[0])
		}
	}
	if len(out) != 3 {
		t.Fatal("no tags sharing a node")
	}
	return out
}

// TestCoveredWriteInPlace: with Redis time, a token bucket's write that
// the key's deadline covers goes in place (SETRANGE: Redis's object for
// the value is then raw, where SET makes an embstr of a string this
// short), keeps the deadline, and leaves exactly the state the take
// computed; a key holding the older 24-byte layout, its deadline covering
// the take, is replaced whole (SET KEEPTTL): 40 bytes after it, the
// deadline kept.
func TestCoveredWriteInPlace(t *testing.T) {
	t.Parallel()
	s, c := newStore(t) // Redis time, defaultMinTTL
	ctx := context.Background()
	const N, P, B = 10.0, 1e6, 100.0 // 10/s in µs, burst 100
	l := quota.Limit{Algorithm: quota.TokenBucket, Rate: 10, Period: time.Second, Burst: 100}
	var res [1]quota.Result
	take := func(k string) {
		t.Helper()
		if ok, err := s.Take(ctx, []quota.Bucket{{Key: k, Limit: l, Cost: 1}}, res[:]); err != nil || !ok {
			t.Fatalf("take %s: %v %v", k, ok, err)
		}
	}
	// state returns k's numbers, its object encoding and deadline (ms).
	state := func(k string) (nums []float64, enc string, deadline int64) {
		t.Helper()
		v, err := c.Get(ctx, k).Bytes()
		if err != nil || len(v)%8 != 0 {
			t.Fatalf("GET %s: %d bytes, %v", k, len(v), err)
		}
		for i := 0; i < len(v); i += 8 {
			nums = append(nums, math.Float64frombits(binary.LittleEndian.Uint64(v[i:])))
		}
		return nums, c.ObjectEncoding(ctx, k).Val(), pexpireTime(t, c, k)
	}
	// next takes k once Redis's clock has moved on, and checks the state
	// it left against the one before: charged once after the refill of
	// the time between, written at a later time, the deadline kept.
	next := func(k string, tokens, ts float64, deadline int64) []float64 {
		t.Helper()
		t0 := redisNow(t, c)
		WaitFor(t, "Redis's clock past the last take", func() bool { return redisNow(t, c).Sub(t0) > 2*time.Millisecond })
		take(k)
		nums, _, d := state(k)
		if len(nums) != 5 {
			t.Fatalf("%s: a state of %d numbers after the take, want 5 (40 bytes)", k, len(nums))
		}
		el := nums[2] - ts
		want := tokens + (el*N)/P // the script's arithmetic, in its order
		if want > B {
			want = B
		}
		if want -= 1; el <= 0 || nums[1] != want || nums[3] != B || nums[4] != N/P {
			t.Fatalf("%s: state %v after a take %v µs later than one leaving %v tokens, want %v tokens", k, nums, el, tokens, want)
		}
		if d != deadline {
			t.Fatalf("%s: deadline %d after a covered take, was %d: want it kept", k, d, deadline)
		}
		return nums
	}

	take("w:a")
	nums, enc, d := state("w:a")
	if len(nums) != 5 || enc != "embstr" {
		t.Fatalf("first take: state %v (%s), want 5 numbers written by SET (embstr)", nums, enc)
	}
	nums = next("w:a", nums[1], nums[2], d)
	if _, enc, _ := state("w:a"); enc != "raw" {
		t.Fatalf("covered take: encoding %s, want raw (written in place by SETRANGE)", enc)
	}
	next("w:a", nums[1], nums[2], d) // in place again

	// The older layout, E, tokens, ts, deadline a minute on: replaced.
	now := redisNow(t, c)
	E := now.Add(time.Minute).UnixMilli()
	ts := float64(now.UnixMicro())
	old := make([]byte, 24)
	for i, x := range []float64{float64(E), 50, ts} {
		binary.LittleEndian.PutUint64(old[8*i:], math.Float64bits(x))
	}
	if err := c.Set(ctx, "w:old", old, 0).Err(); err != nil {
		t.Fatal(err)
	}
	if err := c.PExpireAt(ctx, "w:old", time.UnixMilli(E)).Err(); err != nil {
		t.Fatal(err)
	}
	next("w:old", 50, ts, E)
}

// redisNow returns Redis's clock (TIME).
func redisNow(t *testing.T, c *redis.Client) time.Time {
	t.Helper()
	tm, err := c.Time(context.Background()).Result()
	if err != nil {
		t.Fatal(err)
	}
	return tm
}

// pexpireTime returns k's deadline as Redis keeps it (PEXPIRETIME, ms since
// the Unix epoch), failing t when k has none or does not exist.
func pexpireTime(t *testing.T, c *redis.Client, k string) int64 {
	t.Helper()
	ms, err := c.Do(context.Background(), "PEXPIRETIME", k).Int64()
	if err != nil || ms < 0 {
		t.Fatalf("PEXPIRETIME %s = %d, %v", k, ms, err)
	}
	return ms
}
