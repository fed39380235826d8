package redisstore

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/floodgate-go/floodgate/internal/lateanswer"
	"github.com/floodgate-go/floodgate/quota"
	"github.com/floodgate-go/floodgate/testing/redistest"
)

// twoNodeTags returns two hash tags, starting with name, whose slots are
// served by different masters of c, and the master of the first.
func twoNodeTags(t *testing.T, c *redis.ClusterClient, name string) (x, y string, nx *redis.Client) {
	t.Helper()
	ctx := context.Background()
	addr := func(tag string) (*redis.Client, string) {
		m, err := c.MasterForKey(ctx, tag)
		if err != nil {
			t.Fatal(err)
		}
		return m, m.Options().Addr
	}
	x = "{" + name + "=x}"
	nx, ax := addr(x)
	for i := 0; i < 100; i++ {
		y = fmt.Sprintf("{%s=y%d}", name, i)
		if _, ay := addr(y); ay != ax {
			return x, y, nx
		}
	}
	t.Fatal("no two tags on different masters")
	return
}

// TestClusterPartialChargeSeen counts how often a request saw the partial
// charge of another request's multi-slot take: deniers take {x: 1, y: 1}
// where y is exhausted, so every one of their takes charges x (its slot
// allows), then is denied by y's slot and refunds x; observers concurrently
// read x (cost 0). x is never charged for good, so an observer that reads
// less than its burst saw a charge between its take and its refund. The
// count is printed (go test -v); the test asserts that no charge stays
// (x reads its full burst at the end) and that an observer never sees
// more charged than deniers run at once. Batched (the default) and
// unbatched, on the shared cluster, under the test's own prefix.
func TestClusterPartialChargeSeen(t *testing.T) {
	t.Parallel()
	c, prefix := SharedCluster(t)
	x, y, _ := twoNodeTags(t, c, "pcs")
	const (
		burst     = 1000
		deniers   = 8
		observers = 4
		rounds    = 150
	)
	l := quota.Limit{Algorithm: quota.TokenBucket, Rate: 1, Period: time.Hour, Burst: burst}
	ly := quota.Limit{Algorithm: quota.TokenBucket, Rate: 1, Period: time.Hour, Burst: 1}
	for _, mode := range []struct {
		name string
		opts []Option
	}{{"batched", nil}, {"unbatched", []Option{WithBatching(0, 0)}}} {
		t.Run(mode.name, func(t *testing.T) {
			st, err := New(c, append(mode.opts, WithDenialCache(0), WithPrefix(prefix))...)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = st.Close() })
			ctx := context.Background()
			bx, by := quota.Bucket{Key: x + mode.name, Limit: l, Cost: 1}, quota.Bucket{Key: y + mode.name, Limit: ly, Cost: 1}
			if ok, _ := takeOK(t, st, []quota.Bucket{by}); !ok {
				t.Fatal("the first take of y was denied")
			}
			peek := bx
			peek.Cost = 0
			var seen, reads, worst atomic.Int64
			var wg sync.WaitGroup
			for g := 0; g < deniers; g++ {
				wg.Add(1)
				go func() {
					defer wg.Done()
					var res [2]quota.Result
					for range rounds {
						ok, err := st.Take(ctx, []quota.Bucket{bx, by}, res[:])
						if ok || err != nil {
							t.Errorf("denier: allowed %v, error %v; want a deny", ok, err)
							return
						}
					}
				}()
			}
			for g := 0; g < observers; g++ {
				wg.Add(1)
				go func() {
					defer wg.Done()
					var res [1]quota.Result
					for range 2 * rounds {
						if _, err := st.Take(ctx, []quota.Bucket{peek}, res[:]); err != nil {
							t.Errorf("observer: %v", err)
							return
						}
						reads.Add(1)
						if d := burst - res[0].Remaining; d > 0 {
							seen.Add(1)
							for w := worst.Load(); d > w && !worst.CompareAndSwap(w, d); w = worst.Load() {
							}
						}
					}
				}()
			}
			wg.Wait()
			_, res := takeOK(t, st, []quota.Bucket{peek})
			if res[0].Remaining != burst {
				t.Fatalf("x reads %d after every take was refunded, want %d", res[0].Remaining, burst)
			}
			if w := worst.Load(); w > deniers {
				t.Fatalf("an observer saw %d units charged with %d deniers", w, deniers)
			}
			t.Logf("partial charge (%s, %d deniers x %d denied 2-slot takes, %d observers): seen by %d of %d reads (%.1f%%), at most %d units",
				mode.name, deniers, rounds, observers, seen.Load(), reads.Load(), 100*float64(seen.Load())/float64(reads.Load()), worst.Load())
		})
	}
}

// refundSetup is a store on cl, a cluster of the test's own, whose
// refunds (of a denied multi-slot take) the test may hold up with the
// store's beforeRefund, and the buckets: x (on the node nx) charged 10 of
// its burst beforehand, and y, exhausted, on another node.
func refundSetup(t *testing.T, cl *redistest.Cluster, name string, lx quota.Limit) (st *Store, bx, by quota.Bucket, nx *redistest.Server) {
	t.Helper()
	st, bx, by, mx := refundStore(t, cl.Client(), name, lx)
	for _, n := range cl.Nodes() {
		if n.Addr() == mx.Options().Addr {
			nx = n
		}
	}
	if nx == nil {
		t.Fatalf("no node at %s", mx.Options().Addr)
	}
	return st, bx, by, nx
}

// refundStore is refundSetup's store on client c, built with opts, and
// its buckets; mx is x's master.
func refundStore(t *testing.T, c *redis.ClusterClient, name string, lx quota.Limit, opts ...Option) (st *Store, bx, by quota.Bucket, mx *redis.Client) {
	t.Helper()
	x, y, mx := twoNodeTags(t, c, name)
	st, err := New(c, append(opts, WithDenialCache(0))...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	ly := quota.Limit{Algorithm: quota.TokenBucket, Rate: 1, Period: time.Hour, Burst: 1}
	bx, by = quota.Bucket{Key: x, Limit: lx, Cost: 10}, quota.Bucket{Key: y, Limit: ly, Cost: 1}
	for _, b := range []quota.Bucket{bx, by} {
		if ok, _ := takeOK(t, st, []quota.Bucket{b}); !ok {
			t.Fatalf("the first take of %s was denied", b.Key)
		}
	}
	bx.Cost = 5
	return st, bx, by, mx
}

// refundSends is a go-redis hook that counts the refund.lua calls a
// client sends, on their own or in a pipeline: a refund's first send and
// each retry.
type refundSends struct{ n atomic.Int64 }

func (r *refundSends) DialHook(next redis.DialHook) redis.DialHook { return next }

func (r *refundSends) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		r.note(cmd)
		return next(ctx, cmd)
	}
}

func (r *refundSends) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		for _, cmd := range cmds {
			r.note(cmd)
		}
		return next(ctx, cmds)
	}
}

func (r *refundSends) note(cmd redis.Cmder) {
	if a := cmd.Args(); len(a) > 1 && (a[1] == refundScript.shaArg || a[1] == refundScript.srcArg) {
		r.n.Add(1)
	}
}

// takeOK takes bs from st, failing the test on an error.
func takeOK(t *testing.T, st *Store, bs []quota.Bucket) (bool, []quota.Result) {
	t.Helper()
	res := make([]quota.Result, len(bs))
	ok, err := st.Take(context.Background(), bs, res)
	if err != nil {
		t.Fatalf("Take: %v", err)
	}
	return ok, res
}

// remaining reads bucket b's remaining units (a take of cost 0).
func remaining(t *testing.T, st *Store, b quota.Bucket) int64 {
	t.Helper()
	b.Cost = 0
	_, res := takeOK(t, st, []quota.Bucket{b})
	return res[0].Remaining
}

// oom makes node n refuse every script's first write (maxmemory 1 byte),
// or lifts that.
func oom(t *testing.T, n *redistest.Server, on bool) {
	t.Helper()
	v := "0"
	if on {
		v = "1"
	}
	if err := n.Client().ConfigSet(context.Background(), "maxmemory", v).Err(); err != nil {
		t.Fatal(err)
	}
}

// TestClusterRefundRetried: the refund of a denied multi-slot take fails
// (x's master refuses writes, out of memory), so x stays charged and the
// take's error says the refund is retried; a retry fails too, changing
// nothing; once the master takes writes again, the retrier applies it,
// exactly once: x reads what it read before the take. A cluster of its
// own: it runs a master out of memory.
func TestClusterRefundRetried(t *testing.T) {
	wait := redistest.StartClusterAsync(t)
	t.Parallel()
	lx := quota.Limit{Algorithm: quota.TokenBucket, Rate: 1, Period: time.Hour, Burst: 1000}
	st, bx, by, nx := refundSetup(t, wait(), "rr", lx)
	sends := &refundSends{}
	st.client.AddHook(sends)
	before := remaining(t, st, bx)
	st.beforeRefund = func() { oom(t, nx, true) }
	var res [2]quota.Result
	ok, err := st.Take(context.Background(), []quota.Bucket{bx, by}, res[:])
	st.beforeRefund = nil
	if ok || err == nil || !strings.Contains(err.Error(), "retried in the background") {
		t.Fatalf("Take: allowed %v, error %v; want a deny whose refund is retried", ok, err)
	}
	raw, _ := nx.Client().Get(context.Background(), bx.Key).Result()
	// The first send and two retries, refused.
	WaitFor(t, "the refund sent again twice", func() bool { return sends.n.Load() >= 3 })
	if now, _ := nx.Client().Get(context.Background(), bx.Key).Result(); now != raw {
		t.Fatal("x's state changed while its master refused writes")
	}
	if a := st.retry.applied.Load(); a != 0 {
		t.Fatalf("%d refunds applied while x's master refused writes", a)
	}
	oom(t, nx, false)
	WaitFor(t, "the refund applied once x's master takes writes", func() bool { return st.retry.applied.Load() != 0 })
	if a := st.retry.applied.Load(); a != 1 {
		t.Fatalf("%d refunds applied by the retrier, want 1", a)
	}
	if got := remaining(t, st, bx); got != before {
		t.Fatalf("x reads %d after the retried refund, want %d as before the take", got, before)
	}
}

// TestClusterRefundGivenUp: a refund that cannot apply is retried only
// until the units it would give back have come back by themselves (here
// 15 ms after the charge: x refills 1000/s), then dropped. The first
// retry is due 20 ms after the failure, past that deadline on any
// machine. A cluster of its own: it runs a master out of memory.
func TestClusterRefundGivenUp(t *testing.T) {
	wait := redistest.StartClusterAsync(t)
	t.Parallel()
	lx := quota.Limit{Algorithm: quota.TokenBucket, Rate: 1000, Period: time.Second, Burst: 1000}
	st, bx, by, nx := refundSetup(t, wait(), "rg", lx)
	st.beforeRefund = func() { oom(t, nx, true) }
	defer oom(t, nx, false)
	var res [2]quota.Result
	ok, err := st.Take(context.Background(), []quota.Bucket{bx, by}, res[:])
	st.beforeRefund = nil
	if ok || err == nil || !strings.Contains(err.Error(), "retried in the background") {
		t.Fatalf("Take: allowed %v, error %v; want a deny whose refund is retried", ok, err)
	}
	WaitFor(t, "the refund given up", func() bool { return st.retry.expired.Load() != 0 })
	if e, a := st.retry.expired.Load(), st.retry.applied.Load(); e != 1 || a != 0 {
		t.Fatalf("retrier: %d expired, %d applied; want 1 given up at its deadline, none applied", e, a)
	}
	oom(t, nx, false)
	if got := remaining(t, st, bx); got != 1000 {
		t.Fatalf("x reads %d, want its full burst (the charge came back by itself)", got)
	}
}

// TestClusterRefundCalendarWindow: a denied multi-slot take's refund gives
// a calendar window's units back to the window the take charged, also when
// another take charged the key between the charge and the refund (so the
// refund cannot put the old state back and gives the units back
// arithmetically): x, a day's calendar window of 100, reads 80 after two
// takes of 5 that stand and one of 5 refunded, and the 10 refundStore's
// first take counted in the 24-hour window that is this same UTC day (a
// window whose count carries into the calendar window that overlaps it,
// quota.Algorithm's "Limit changes"). On the shared cluster, under the
// test's own prefix.
func TestClusterRefundCalendarWindow(t *testing.T) {
	t.Parallel()
	lx := quota.Limit{Algorithm: quota.FixedWindow, Rate: 100, Period: 24 * time.Hour}
	c, prefix := SharedCluster(t)
	st, bx, by, _ := refundStore(t, c, "cw", lx, WithPrefix(prefix))
	day := time.Now().UTC().Truncate(24 * time.Hour)
	bx.Span = quota.Span{Start: day, End: day.Add(24 * time.Hour)}
	if ok, _ := takeOK(t, st, []quota.Bucket{bx}); !ok {
		t.Fatal("the first take of the calendar window was denied")
	}
	st.beforeRefund = func() {
		if ok, _ := takeOK(t, st, []quota.Bucket{bx}); !ok {
			t.Error("the take between the charge and the refund was denied")
		}
	}
	ok, _ := takeOK(t, st, []quota.Bucket{bx, by})
	st.beforeRefund = nil
	if ok {
		t.Fatal("the take of x and the exhausted y was allowed")
	}
	if got := remaining(t, st, bx); got != 80 {
		t.Fatalf("x's calendar window reads %d remaining, want 80 (100 - 10 - 5 - 5, the refunded 5 given back)", got)
	}
}

// TestClusterAbandonedTake: a multi-slot take whose caller gives up while
// x's master is stalled (SIGSTOP), after both parts were sent, is
// finished as a whole when the master resumes. With y exhausted, y's part
// denies at once, and x's part charges when its master resumes, so that
// charge is refunded: x reads what it read before (when the caller's
// give-up ended the take, those 5 units stayed charged), and the caller's
// lateanswer.Receiver gets the deny. With y2, a bucket with room in y's
// slot, both parts charge: the late answer allows, and both charges stand
// (when the give-up ended the take, y2 was refunded and x stayed charged).
// The caller gives up when a hook has seen both parts' calls leave (its
// context cancelled then), not after a time: the order holds on any
// machine. A cluster of its own: it pauses a master.
func TestClusterAbandonedTake(t *testing.T) {
	wait := redistest.StartClusterAsync(t)
	t.Parallel()
	lx := quota.Limit{Algorithm: quota.TokenBucket, Rate: 1, Period: time.Hour, Burst: 1000}
	cl := wait()
	PausesHeld(t, cl)
	st, bx, by, nx := refundSetup(t, cl, "ab", lx)
	if !st.AnswersLate() {
		t.Fatal("AnswersLate() = false on a cluster with batching on")
	}
	// giveUp, when set, is called with each script call sent.
	var giveUp atomic.Pointer[func()]
	st.client.AddHook(scriptCalls{func() {
		if f := giveUp.Load(); f != nil {
			(*f)()
		}
	}})
	by2 := quota.Bucket{Key: by.Key + ":room", Limit: lx, Cost: 7}
	for _, tc := range []struct {
		name    string
		y       quota.Bucket
		allowed bool
		x, y2   int64 // what x and y2 read after the late answer
	}{
		{"y denies", by, false, 990, 1000},
		{"both allow", by2, true, 985, 993},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := remaining(t, st, bx); got != 990 {
				t.Fatalf("x reads %d before the take, want 990", got)
			}
			sink := &LateSink{Got: make(chan LateAnswer, 1)}
			ctx, cancel := context.WithCancel(context.WithValue(context.Background(), lateanswer.Key, lateanswer.Receiver(sink)))
			defer cancel()
			var parts atomic.Int64
			f := func() {
				if parts.Add(1) == 2 { // x's part and y's: the take is under way
					cancel()
				}
			}
			giveUp.Store(&f)
			nx.Pause()
			var res [2]quota.Result
			_, err := st.Take(ctx, []quota.Bucket{bx, tc.y}, res[:])
			giveUp.Store(nil)
			nx.Resume()
			if !errors.Is(err, context.Canceled) {
				t.Fatalf("Take while x's master is stalled, given up: %v, want the context's error", err)
			}
			if len(sink.Buckets) != 2 || sink.Buckets[0].Key != bx.Key || sink.Buckets[1].Key != tc.y.Key {
				t.Fatalf("Late was given %+v, want the take's two buckets", sink.Buckets)
			}
			var a LateAnswer
			select {
			case a = <-sink.Got:
			case <-time.After(10 * time.Second):
				t.Fatal("no late answer within 10s of x's master resuming")
			}
			if a.Err != nil || a.Allowed != tc.allowed || len(a.Res) != 2 || a.Res[1].Allowed != tc.allowed {
				t.Fatalf("late answer %+v, want allowed %v", a, tc.allowed)
			}
			if got := remaining(t, st, bx); got != tc.x {
				t.Errorf("x reads %d after the late answer, want %d", got, tc.x)
			}
			if got := remaining(t, st, by2); got != tc.y2 {
				t.Errorf("y2 reads %d after the late answer, want %d", got, tc.y2)
			}
		})
	}
}

// scriptCalls is a go-redis hook that calls sent for each script call
// (evalsha, eval) a client is about to send, on its own or in a pipeline.
type scriptCalls struct{ sent func() }

func (h scriptCalls) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h scriptCalls) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		h.note(cmd)
		return next(ctx, cmd)
	}
}

func (h scriptCalls) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		for _, cmd := range cmds {
			h.note(cmd)
		}
		return next(ctx, cmds)
	}
}

func (h scriptCalls) note(cmd redis.Cmder) {
	if n := cmd.Name(); n == "evalsha" || n == "eval" {
		h.sent()
	}
}
