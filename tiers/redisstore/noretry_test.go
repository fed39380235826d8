package redisstore_test

import (
	"context"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/floodgate-go/floodgate/quota"
	"github.com/floodgate-go/floodgate/testing/clock"
	"github.com/floodgate-go/floodgate/testing/redistest"
	"github.com/floodgate-go/floodgate/tiers/redisstore"
)

// frozenClock is a frozen clock for these tests.
func frozenClock() *clock.Fake { return clock.New(time.Unix(1_800_000_000, 0)) }

// warm fills the client's pool with idle, initialised connections (to the
// node of keys, on a Cluster), so a go-redis retry during a stall would
// not need a handshake.
func warm(t *testing.T, c redis.UniversalClient, keys ...any) {
	t.Helper()
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			args := append([]any{"eval", "local t = redis.call('TIME') while true do local u = redis.call('TIME'); if (u[1]-t[1])*1000000 + (u[2]-t[2]) > 30000 then break end end return 1", len(keys)}, keys...)
			_ = c.Do(context.Background(), args...).Err()
		})
	}
	wg.Wait()
}

// stalledCluster starts a Cluster and a client of it as NewClient builds
// one with a 200ms read timeout, and returns the client and the node
// holding key.
func stalledCluster(t *testing.T, key string) (*redis.ClusterClient, *redistest.Server) {
	t.Helper()
	cl := redistest.StartCluster(t)
	uc, err := redisstore.NewClient("redis+cluster://" + cl.Addrs()[0] + "?read_timeout=200ms")
	if err != nil {
		t.Fatal(err)
	}
	c := uc.(*redis.ClusterClient)
	t.Cleanup(func() { _ = c.Close() })
	m, err := c.MasterForKey(context.Background(), key)
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range cl.Nodes() {
		if n.Addr() == m.Options().Addr {
			return c, n
		}
	}
	t.Fatalf("no node at %s", m.Options().Addr)
	return nil, nil
}

func TestStalledReplyNotSentTwice(t *testing.T) {
	srv := redistest.Start(t)
	c := redis.NewClient(&redis.Options{
		Addr:                  srv.Addr(),
		ContextTimeoutEnabled: true,
		DialerRetries:         1,
		ReadTimeout:           200 * time.Millisecond,
	})
	defer c.Close()
	clk := frozenClock()
	st, err := redisstore.New(c, redisstore.WithClock(clk), redisstore.WithMinTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	warm(t, c)

	l := quota.Limit{Algorithm: quota.GCRA, Rate: 1, Period: time.Hour, Burst: 10}
	bs := []quota.Bucket{{Key: "noretry:stall", Limit: l, Cost: 1}}

	srv.Pause()
	type out struct {
		ok  bool
		err error
		res quota.Result
	}
	done := make(chan out, 1)
	go func() {
		var res [1]quota.Result
		ok, err := st.Take(context.Background(), bs, res[:])
		done <- out{ok, err, res[0]}
	}()
	time.Sleep(500 * time.Millisecond) // past ReadTimeout: go-redis re-sends
	srv.Resume()
	var o out
	select {
	case o = <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Take did not return")
	}
	t.Logf("Take: ok=%v err=%v remaining=%d", o.ok, o.err, o.res.Remaining)

	// What the bucket holds now: a zero-cost take reports it.
	var res [1]quota.Result
	probe := []quota.Bucket{{Key: "noretry:stall", Limit: l, Cost: 0}}
	if _, err := st.Take(context.Background(), probe, res[:]); err != nil {
		t.Fatal(err)
	}
	charged := l.Burst - res[0].Remaining
	want := int64(0)
	if o.ok {
		want = 1
	}
	if o.err != nil {
		want = -1 // may or may not have been charged, but at most once
	}
	if charged > 1 || (want >= 0 && charged != want) {
		t.Fatalf("one take (ok=%v err=%v) charged the bucket %d units, want %d (at most 1)", o.ok, o.err, charged, max(want, 1))
	}
}

// TestStalledReplyNotSentTwiceCluster: the same on a Cluster, with the
// client the package itself recommends (redisstore.NewClient, MaxRetries
// -1 but MaxRedirects 3): ClusterClient re-sent a script call whose read
// timed out, whatever MaxRetries says.
func TestStalledReplyNotSentTwiceCluster(t *testing.T) {
	key := "noretry:{stall}"
	c, node := stalledCluster(t, key)
	clk := frozenClock()
	st, err := redisstore.New(c, redisstore.WithClock(clk), redisstore.WithMinTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	l := quota.Limit{Algorithm: quota.GCRA, Rate: 1, Period: time.Hour, Burst: 10}
	var res [1]quota.Result
	if _, err := st.Take(context.Background(), []quota.Bucket{{Key: key, Limit: l, Cost: 0}}, res[:]); err != nil {
		t.Fatal(err)
	}
	warm(t, c, key)

	node.Pause()
	done := make(chan error, 1)
	var ok bool
	go func() {
		var r [1]quota.Result
		var err error
		ok, err = st.Take(context.Background(), []quota.Bucket{{Key: key, Limit: l, Cost: 1}}, r[:])
		done <- err
	}()
	time.Sleep(500 * time.Millisecond)
	node.Resume()
	var terr error
	select {
	case terr = <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Take did not return")
	}
	if _, err := st.Take(context.Background(), []quota.Bucket{{Key: key, Limit: l, Cost: 0}}, res[:]); err != nil {
		t.Fatal(err)
	}
	charged := l.Burst - res[0].Remaining
	t.Logf("Take: ok=%v err=%v; bucket charged %d", ok, terr, charged)
	if charged > 1 {
		t.Fatalf("one take (ok=%v err=%v) charged the bucket %d units, want at most 1", ok, terr, charged)
	}
}

// TestStalledReportNotSentTwice: a Report on a Cluster (client by
// redisstore.NewClient) whose reply is late past ReadTimeout fails (the
// caller asks Resolve) and is not sent again: a re-send found the first
// send's record and replied "not applied" with no error, so localfirst
// owed units that were charged and sent them again.
func TestStalledReportNotSentTwice(t *testing.T) {
	key := "noretry:{rep}"
	c, node := stalledCluster(t, key)
	st, err := redisstore.New(c, redisstore.WithClock(frozenClock()), redisstore.WithMinTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	l := quota.Limit{Algorithm: quota.TokenBucket, Rate: 1, Period: time.Hour, Burst: 10}
	warm(t, c, key)

	bs := []quota.Bucket{{Key: key, Limit: l, Cost: 3}}
	out := make([]quota.ReportResult, 1)
	node.Pause()
	done := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		done <- st.Report(ctx, 7, 1, bs, out)
	}()
	time.Sleep(500 * time.Millisecond)
	node.Resume()
	var rerr error
	select {
	case rerr = <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Report did not return")
	}
	var res [1]quota.Result
	if _, err := st.Take(context.Background(), []quota.Bucket{{Key: key, Limit: l, Cost: 0}}, res[:]); err != nil {
		t.Fatal(err)
	}
	charged := l.Burst - res[0].Remaining
	t.Logf("Report: err=%v result=%+v; bucket charged %d", rerr, out[0], charged)
	if rerr == nil && !out[0].Applied && charged != 0 {
		t.Fatalf("Report returned no error and Applied=false (refused), yet the bucket was charged %d units", charged)
	}
}

// TestCloseAnswersTheTakesItSends: Close sends the takes already queued
// or in flight; their callers get those takes' answers, not "store is
// closed" for a take that was then charged.
func TestCloseAnswersTheTakesItSends(t *testing.T) {
	srv := redistest.Start(t)
	c := srv.NewClient()
	st, err := redisstore.New(c, redisstore.WithClock(frozenClock()), redisstore.WithMinTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	l := quota.Limit{Algorithm: quota.GCRA, Rate: 1, Period: time.Hour, Burst: 10}
	bs := []quota.Bucket{{Key: "close", Limit: l, Cost: 1}}
	var res [1]quota.Result
	if _, err := st.Take(context.Background(), []quota.Bucket{{Key: "close", Limit: l, Cost: 0}}, res[:]); err != nil {
		t.Fatal(err)
	}
	srv.Pause()
	type out struct {
		ok  bool
		err error
	}
	done := make(chan out, 1)
	go func() {
		var r [1]quota.Result
		ok, err := st.Take(context.Background(), bs, r[:])
		done <- out{ok, err}
	}()
	time.Sleep(100 * time.Millisecond) // the take is in flight
	closed := make(chan struct{})
	go func() { _ = st.Close(); close(closed) }()
	time.Sleep(100 * time.Millisecond) // Close has begun
	srv.Resume()
	var o out
	select {
	case o = <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("Take did not return")
	}
	<-closed
	if !o.ok || o.err != nil {
		t.Fatalf("the take Close sent: ok=%v err=%v, want its answer (allowed)", o.ok, o.err)
	}
	st2, err := redisstore.New(c, redisstore.WithClock(frozenClock()), redisstore.WithMinTTL(time.Minute), redisstore.WithBatching(0, 0))
	if err != nil {
		t.Fatal(err)
	}
	defer st2.Close()
	if _, err := st2.Take(context.Background(), []quota.Bucket{{Key: "close", Limit: l, Cost: 0}}, res[:]); err != nil {
		t.Fatal(err)
	}
	if charged := l.Burst - res[0].Remaining; charged != 1 {
		t.Fatalf("charged %d, want 1", charged)
	}
	// After Close, a take is refused and charges nothing.
	if _, err := st.Take(context.Background(), bs, res[:]); err == nil {
		t.Fatal("take after Close: no error")
	}
}

// TestNegativeReportLiftsDenial: units given back by a negative Report
// (how localfirst returns leases) drop the bucket's cached denial, as a
// Settle giving units back does; the denial stayed until its retry-after
// before.
func TestNegativeReportLiftsDenial(t *testing.T) {
	srv := redistest.Start(t)
	st := fakeTimeStore(t, srv.NewClient(), frozenClock(), redisstore.WithDenialCache(10))
	l := quota.Limit{Algorithm: quota.TokenBucket, Rate: 1, Period: time.Hour, Burst: 2}
	b := quota.Bucket{Key: "noretry:neg", Limit: l, Cost: 2, CacheDenials: true}
	mustTake(t, st, []quota.Bucket{b})
	if ok, _ := mustTake(t, st, []quota.Bucket{b}); ok {
		t.Fatal("second take allowed")
	}
	back := b
	back.Cost = -2
	out := make([]quota.ReportResult, 1)
	if err := st.Report(context.Background(), 1, 1, []quota.Bucket{back}, out); err != nil || !out[0].Applied {
		t.Fatalf("Report: %v %+v", err, out[0])
	}
	if ok, res := mustTake(t, st, []quota.Bucket{b}); !ok {
		t.Fatalf("take after 2 units given back by Report: denied %+v, want allowed", res[0])
	}
}

// TestManyBucketsKeyOfAnotherType: take.lua replaces a state key holding
// another type (MGET reads it as absent), in a call of more than 1000
// keys too (one take of many levels, or a merged batch of 64 takes of 16
// buckets), which reads them one by one: GET failed the whole call with
// WRONGTYPE.
func TestManyBucketsKeyOfAnotherType(t *testing.T) {
	srv := redistest.Start(t)
	c := srv.NewClient()
	st := fakeTimeStore(t, c, frozenClock(), redisstore.WithBatching(0, 0))
	if err := c.RPush(context.Background(), "wt:7", "x").Err(); err != nil {
		t.Fatal(err)
	}
	l := quota.Limit{Algorithm: quota.TokenBucket, Rate: 10, Period: time.Second, Burst: 10}
	for _, n := range []int{1000, 1001} {
		bs := make([]quota.Bucket, n)
		for i := range bs {
			bs[i] = quota.Bucket{Key: "wt:" + strconv.Itoa(i), Limit: l, Cost: 1}
		}
		res := make([]quota.Result, n)
		ok, err := st.Take(context.Background(), bs, res)
		if err != nil || !ok {
			t.Errorf("take of %d buckets, one key a list: %v %v, want allowed (the key replaced)", n, ok, err)
		}
		_ = c.Del(context.Background(), "wt:7").Err()
		_ = c.RPush(context.Background(), "wt:7", "x").Err()
	}
}

// TestGCRAFasterThanAMicrosecond: at more than one unit a microsecond
// (10000/1ms, T = 0.1 µs) a frozen clock admits exactly the burst, as in
// memstore: take.lua's slack is at most half an emission interval.
func TestGCRAFasterThanAMicrosecond(t *testing.T) {
	srv := redistest.Start(t)
	st := fakeTimeStore(t, srv.NewClient(), frozenClock(), redisstore.WithBatching(0, 0))
	l := quota.Limit{Algorithm: quota.GCRA, Rate: 10_000, Period: time.Millisecond, Burst: 10}
	n := 0
	for range 100 {
		if ok, _ := mustTake(t, st, []quota.Bucket{{Key: "gcra:fast", Limit: l, Cost: 1}}); ok {
			n++
		}
	}
	if n != 10 {
		t.Fatalf("%d admitted at one instant, want the burst, 10", n)
	}
}
