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
// unbatched, on a 3-master cluster.
func TestClusterPartialChargeSeen(t *testing.T) {
	cl := redistest.StartCluster(t)
	c := cl.Client()
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
			st, err := New(c, append(mode.opts, WithDenialCache(0))...)
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
			fmt.Printf("partial charge (%s, %d deniers x %d denied 2-slot takes, %d observers): seen by %d of %d reads (%.1f%%), at most %d units\n",
				mode.name, deniers, rounds, observers, seen.Load(), reads.Load(), 100*float64(seen.Load())/float64(reads.Load()), worst.Load())
		})
	}
}

// refundSetup is a store on a 3-master cluster whose refunds are held up
// by hold, which runs before the refunds of a denied multi-slot take are
// sent, and the buckets: x (on the node nx) charged 10 of its burst
// beforehand, and y, exhausted, on another node.
func refundSetup(t *testing.T, name string, lx quota.Limit) (st *Store, bx, by quota.Bucket, nx *redistest.Server) {
	t.Helper()
	cl := redistest.StartCluster(t)
	c := cl.Client()
	x, y, mx := twoNodeTags(t, c, name)
	for _, n := range cl.Nodes() {
		if n.Addr() == mx.Options().Addr {
			nx = n
		}
	}
	if nx == nil {
		t.Fatalf("no node at %s", mx.Options().Addr)
	}
	st, err := New(c, WithDenialCache(0))
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
	return st, bx, by, nx
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
// take's error says the refund is retried; once the master takes writes
// again, the retrier applies it, exactly once: x reads what it read before
// the take.
func TestClusterRefundRetried(t *testing.T) {
	lx := quota.Limit{Algorithm: quota.TokenBucket, Rate: 1, Period: time.Hour, Burst: 1000}
	st, bx, by, nx := refundSetup(t, "rr", lx)
	before := remaining(t, st, bx)
	st.beforeRefund = func() { oom(t, nx, true) }
	var res [2]quota.Result
	ok, err := st.Take(context.Background(), []quota.Bucket{bx, by}, res[:])
	st.beforeRefund = nil
	if ok || err == nil || !strings.Contains(err.Error(), "retried in the background") {
		t.Fatalf("Take: allowed %v, error %v; want a deny whose refund is retried", ok, err)
	}
	raw, _ := nx.Client().Get(context.Background(), bx.Key).Result()
	time.Sleep(100 * time.Millisecond) // retries fail meanwhile
	if now, _ := nx.Client().Get(context.Background(), bx.Key).Result(); now != raw {
		t.Fatal("x's state changed while its master refused writes")
	}
	oom(t, nx, false)
	deadline := time.Now().Add(5 * time.Second)
	for st.retry.applied.Load() == 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if a := st.retry.applied.Load(); a != 1 {
		t.Fatalf("%d refunds applied by the retrier, want 1", a)
	}
	if got := remaining(t, st, bx); got != before {
		t.Fatalf("x reads %d after the retried refund, want %d as before the take", got, before)
	}
}

// TestClusterRefundLostReply: x's master stalls (SIGSTOP) while the refund
// is on its way, so the caller's wait ends and the retrier sends the
// refund again; when the master resumes it runs both, and the second,
// finding the refund's marker, gives nothing back twice.
func TestClusterRefundLostReply(t *testing.T) {
	lx := quota.Limit{Algorithm: quota.GCRA, Rate: 1, Period: time.Hour, Burst: 1000}
	st, bx, by, nx := refundSetup(t, "rl", lx)
	before := remaining(t, st, bx)
	st.beforeRefund = nx.Pause
	var res [2]quota.Result
	ok, err := st.Take(context.Background(), []quota.Bucket{bx, by}, res[:])
	st.beforeRefund = nil
	if ok || err == nil || !strings.Contains(err.Error(), "retried in the background") {
		nx.Resume()
		t.Fatalf("Take: allowed %v, error %v; want a deny whose refund is retried", ok, err)
	}
	time.Sleep(300 * time.Millisecond) // a retry is sent meanwhile
	nx.Resume()
	deadline := time.Now().Add(10 * time.Second)
	for st.retry.applied.Load() == 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if a := st.retry.applied.Load(); a != 1 {
		t.Fatalf("%d refunds applied by the retrier, want 1", a)
	}
	if got := remaining(t, st, bx); got != before {
		t.Fatalf("x reads %d after the stalled refund and its retry, want %d as before the take (one refund)", got, before)
	}
}

// TestClusterRefundGivenUp: a refund that cannot apply is retried only
// until the units it would give back have come back by themselves (here
// 15 ms after the charge: x refills 1000/s), then dropped.
func TestClusterRefundGivenUp(t *testing.T) {
	lx := quota.Limit{Algorithm: quota.TokenBucket, Rate: 1000, Period: time.Second, Burst: 1000}
	st, bx, by, nx := refundSetup(t, "rg", lx)
	st.beforeRefund = func() { oom(t, nx, true) }
	defer oom(t, nx, false)
	var res [2]quota.Result
	ok, err := st.Take(context.Background(), []quota.Bucket{bx, by}, res[:])
	st.beforeRefund = nil
	if ok || err == nil || !strings.Contains(err.Error(), "retried in the background") {
		t.Fatalf("Take: allowed %v, error %v; want a deny whose refund is retried", ok, err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for st.retry.expired.Load() == 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
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
// arithmetically): x, a day's calendar window of 100, reads 90 after two
// takes of 5 that stand and one of 5 refunded.
func TestClusterRefundCalendarWindow(t *testing.T) {
	lx := quota.Limit{Algorithm: quota.FixedWindow, Rate: 100, Period: 24 * time.Hour}
	st, bx, by, _ := refundSetup(t, "cw", lx)
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
	if got := remaining(t, st, bx); got != 90 {
		t.Fatalf("x's calendar window reads %d remaining, want 90 (100 - 5 - 5, the refunded 5 given back)", got)
	}
}

// TestClusterAbandonedTake: a multi-slot take whose caller gives up while
// x's master is stalled (SIGSTOP), after both parts were queued, is
// finished as a whole when the master resumes. With y exhausted, y's part
// denies at once, and x's part charges when its master resumes, so that
// charge is refunded: x reads what it read before (when the caller's
// give-up ended the take, those 5 units stayed charged), and the caller's
// quota.LateAnswers gets the deny. With y2, a bucket with room in y's
// slot, both parts charge: the late answer allows, and both charges stand
// (when the give-up ended the take, y2 was refunded and x stayed charged).
func TestClusterAbandonedTake(t *testing.T) {
	lx := quota.Limit{Algorithm: quota.TokenBucket, Rate: 1, Period: time.Hour, Burst: 1000}
	st, bx, by, nx := refundSetup(t, "ab", lx)
	if !st.AnswersLate() {
		t.Fatal("AnswersLate() = false on a cluster with batching on")
	}
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
			ctx, cancel := context.WithTimeout(context.WithValue(context.Background(), quota.LateAnswersKey, quota.LateAnswers(sink)), 100*time.Millisecond)
			nx.Pause()
			var res [2]quota.Result
			_, err := st.Take(ctx, []quota.Bucket{bx, tc.y}, res[:])
			cancel()
			nx.Resume()
			if !errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("Take while x's master is stalled: %v, want the context's deadline", err)
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
