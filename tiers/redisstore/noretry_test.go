package redisstore_test

import (
	"context"
	"strconv"
	"sync/atomic"
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

// scriptHook is a go-redis hook that calls sent with each script call
// (evalsha, eval) a client is about to send, on its own or in a pipeline:
// the call has left the batcher's queue.
type scriptHook struct{ sent func(redis.Cmder) }

func (h scriptHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h scriptHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		h.note(cmd)
		return next(ctx, cmd)
	}
}

func (h scriptHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		for _, cmd := range cmds {
			h.note(cmd)
		}
		return next(ctx, cmds)
	}
}

func (h scriptHook) note(cmd redis.Cmder) {
	if n := cmd.Name(); n == "evalsha" || n == "eval" {
		h.sent(cmd)
	}
}

// TestCloseAnswersTheTakesItSends: Close sends the takes already queued
// or in flight; their callers get those takes' answers, not "store is
// closed" for a take that was then charged. The order is made by events:
// Redis is paused, the take leaves the queue (a hook sees its call), Close
// begins (the store is closing), and only then Redis resumes.
func TestCloseAnswersTheTakesItSends(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	c := srv.NewClient()
	var sent atomic.Int64
	c.AddHook(scriptHook{func(redis.Cmder) { sent.Add(1) }})
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
	before := sent.Load()
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
	redisstore.WaitFor(t, "the take sent to the paused Redis", func() bool { return sent.Load() > before })
	closed := make(chan struct{})
	go func() { _ = st.Close(); close(closed) }()
	redisstore.WaitFor(t, "Close begun", func() bool { return redisstore.Closing(st) })
	srv.Resume()
	var o out
	select {
	case o = <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Take did not return within 10s of Redis resuming")
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
	t.Parallel()
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
	t.Parallel()
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
	t.Parallel()
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
