//go:build system

package redisstore_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/floodgate-go/floodgate/quota"
	"github.com/floodgate-go/floodgate/testing/redistest"
	"github.com/floodgate-go/floodgate/tiers/redisstore"
)

// The tests of a reply stalled past the client's read timeout (200 ms):
// the server is paused (SIGSTOP) for 500 ms while the call waits, so the
// read times out and the call fails, and a client that sent it again
// would have the second send answered once the server resumes. What each
// asserts is a count the scenario fixes: one call of a known cost is
// charged at most once, and exactly as its answer (or, for a report, its
// Resolve) says. On a loaded machine the call may leave later, even after
// the resume (then it simply succeeds), or time out later; every outcome
// is checked, none needs the timing of a quiet machine.

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

// stalledCluster returns a client of cl as NewClient builds one with a
// 200ms read timeout, and the node holding key; cl's masters wait a
// minute before they take a paused one for failed (PausesHeld).
func stalledCluster(t *testing.T, cl *redistest.Cluster, key string) (*redis.ClusterClient, *redistest.Server) {
	t.Helper()
	redisstore.PausesHeld(t, cl)
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

// stall pauses srv for 500 ms (past the 200 ms read timeout) while op
// runs in a goroutine, and returns op's error once it has returned (at
// most 10 s after the resume).
func stall(t *testing.T, srv *redistest.Server, op func() error) error {
	t.Helper()
	srv.Pause()
	done := make(chan error, 1)
	go func() { done <- op() }()
	time.Sleep(500 * time.Millisecond) // past ReadTimeout: a client that re-sends does
	srv.Resume()
	select {
	case err := <-done:
		return err
	case <-time.After(10 * time.Second):
		t.Fatal("the call did not return within 10s of the resume")
		return nil
	}
}

// TestStalledReplyNotSentTwice: a take on a standalone Redis whose reply
// is stalled past the read timeout (a client like NewClient's, but
// retrying dials once) charges its bucket at most once: exactly once when
// it was allowed, not at all when denied, and once or not at all when it
// failed (its call may have run when the server resumed). Before, go-redis
// sent the script call again after the timeout, and both ran.
//
// Bound: at most 1 unit charged of a bucket of 10, by the one take of cost
// 1 the test makes; exactly its answer's charge when it has one. A busy
// machine changes which branch is met, not the count any branch allows.
func TestStalledReplyNotSentTwice(t *testing.T) {
	t.Parallel()
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
	var ok bool
	terr := stall(t, srv, func() error {
		var res [1]quota.Result
		var err error
		ok, err = st.Take(context.Background(), bs, res[:])
		return err
	})

	// What the bucket holds now: a zero-cost take reports it.
	var res [1]quota.Result
	probe := []quota.Bucket{{Key: "noretry:stall", Limit: l, Cost: 0}}
	if _, err := st.Take(context.Background(), probe, res[:]); err != nil {
		t.Fatal(err)
	}
	checkStalledTake(t, ok, terr, l.Burst-res[0].Remaining)
}

// checkStalledTake fails t unless one take of cost 1 that returned ok and
// err charged its bucket exactly as its answer says (1 when allowed, 0
// when denied), or at most once when it failed.
func checkStalledTake(t *testing.T, ok bool, err error, charged int64) {
	t.Helper()
	want := int64(0)
	if ok {
		want = 1
	}
	switch {
	case charged > 1:
		t.Fatalf("one take (ok=%v err=%v) charged the bucket %d units: it ran more than once", ok, err, charged)
	case err == nil && charged != want:
		t.Fatalf("one take answered allowed=%v charged the bucket %d units, want %d", ok, charged, want)
	case err != nil:
		t.Logf("the stalled take failed (%v) and charged %d: it ran once when the server resumed, or never", err, charged)
	}
}

// TestStalledReplyNotSentTwiceCluster: the same on a Cluster, with the
// client the package itself recommends (redisstore.NewClient, MaxRetries
// -1 but MaxRedirects 3): ClusterClient re-sent a script call whose read
// timed out, whatever MaxRetries says.
//
// Bound: as TestStalledReplyNotSentTwice's, at most 1 unit of 10 and
// exactly the answer's charge, whatever branch a busy machine leads to.
func TestStalledReplyNotSentTwiceCluster(t *testing.T) {
	wait := redistest.StartClusterAsync(t)
	t.Parallel()
	key := "noretry:{stall}"
	c, node := stalledCluster(t, wait(), key)
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

	var ok bool
	terr := stall(t, node, func() error {
		var r [1]quota.Result
		var err error
		ok, err = st.Take(context.Background(), []quota.Bucket{{Key: key, Limit: l, Cost: 1}}, r[:])
		return err
	})
	if _, err := st.Take(context.Background(), []quota.Bucket{{Key: key, Limit: l, Cost: 0}}, res[:]); err != nil {
		t.Fatal(err)
	}
	checkStalledTake(t, ok, terr, l.Burst-res[0].Remaining)
}

// TestStalledReportNotSentTwice: a Report on a Cluster (client by
// redisstore.NewClient) whose reply is late past ReadTimeout fails and is
// not sent again; the caller asks Resolve, whose answer is what the
// bucket was charged. Before, a re-send found the first send's record and
// replied "not applied" with no error, so localfirst owed units that were
// charged and sent them again.
//
// Bound: the bucket of 10 is charged exactly what the call's own answer
// says: when Report succeeds (it left after the resume, on a busy
// machine), applied with all 3 units; when it fails, what Resolve says it
// applied (3, or nothing when it never ran), never 6. Counts the
// scenario fixes, whatever branch a busy machine leads to.
func TestStalledReportNotSentTwice(t *testing.T) {
	wait := redistest.StartClusterAsync(t)
	t.Parallel()
	key := "noretry:{rep}"
	c, node := stalledCluster(t, wait(), key)
	st, err := redisstore.New(c, redisstore.WithClock(frozenClock()), redisstore.WithMinTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	l := quota.Limit{Algorithm: quota.TokenBucket, Rate: 1, Period: time.Hour, Burst: 10}
	warm(t, c, key)

	bs := []quota.Bucket{{Key: key, Limit: l, Cost: 3}}
	out := make([]quota.ReportResult, 1)
	rerr := stall(t, node, func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		return st.Report(ctx, 7, 1, bs, out)
	})
	charged := func() int64 {
		t.Helper()
		var res [1]quota.Result
		if _, err := st.Take(context.Background(), []quota.Bucket{{Key: key, Limit: l, Cost: 0}}, res[:]); err != nil {
			t.Fatal(err)
		}
		return l.Burst - res[0].Remaining
	}
	if rerr == nil {
		if got := charged(); !out[0].Applied || out[0].Charged != 3 || got != 3 {
			t.Fatalf("Report returned no error with %+v; the bucket was charged %d: want applied, 3 charged, 3 gone from the bucket", out[0], got)
		}
		return
	}
	// The caller asks Resolve, as localfirst does; the server has resumed,
	// so the call ran already or, Resolve recording it, never will.
	resolved := make([]quota.ReportResult, 1)
	if err := st.Resolve(context.Background(), 7, 1, bs, resolved); err != nil {
		t.Fatalf("Resolve after the failed Report (%v): %v", rerr, err)
	}
	want := int64(0)
	if resolved[0].Applied {
		want = resolved[0].Charged
		if want != 3 {
			t.Fatalf("Resolve says the call applied, charging %d of its 3 units of a full bucket", want)
		}
	}
	if got := charged(); got != want {
		t.Fatalf("Report failed (%v); Resolve says %+v, yet the bucket was charged %d units, want %d", rerr, resolved[0], got, want)
	}
	t.Logf("Report failed (%v); Resolve: %+v", rerr, resolved[0])
}
