package redisstore_test

import (
	"context"
	"errors"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/floodgate-go/floodgate/quota"
	"github.com/floodgate-go/floodgate/testing/clock"
	"github.com/floodgate-go/floodgate/testing/redistest"
	"github.com/floodgate-go/floodgate/tiers/redisstore"
)

// pipeCounter counts the pipelines that carry script calls (not those
// of a new connection's handshake) and the commands in every pipeline.
type pipeCounter struct {
	counter
	pipes atomic.Int64
}

func (p *pipeCounter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		scripts := false
		for _, cmd := range cmds {
			p.add(cmd.Name())
			scripts = scripts || cmd.Name() == "evalsha" || cmd.Name() == "eval"
		}
		if scripts {
			p.pipes.Add(1)
		}
		return next(ctx, cmds)
	}
}

// TestBatchingSharesPipelines: 64 takes that queue while Redis is paused
// leave in 2 script calls, not 64 round trips: the first, sent alone
// before the others start, and the 63 queued behind it (each started once
// the first is in flight, and all of them queued before Redis resumes:
// events, not sleeps, order them) merged into one call, in one pipeline.
// Every take is decided exactly (frozen clock: exactly the burst
// allowed), and after SCRIPT FLUSH the batch is re-sent by EVAL without
// failing a take.
func TestBatchingSharesPipelines(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	c := srv.NewClient()
	pc := &pipeCounter{counter: counter{n: map[string]int{}}}
	c.AddHook(pc)
	var sent atomic.Int64
	c.AddHook(scriptHook{func(redis.Cmder) { sent.Add(1) }})
	clk := clock.New(time.Time{})
	st := fakeTimeStore(t, c, clk, redisstore.WithBatching(1, 64))
	defer st.Close()
	l := quota.Limit{Algorithm: quota.GCRA, Rate: 1, Period: time.Hour, Burst: 40}

	run := func(name string) int64 {
		t.Helper()
		pc.take()
		pc.pipes.Store(0)
		srv.Pause()
		var allowed atomic.Int64
		var wg sync.WaitGroup
		take := func() {
			wg.Go(func() {
				var res [1]quota.Result
				ok, err := st.Take(context.Background(), []quota.Bucket{bucket("batch:"+name, l, 1)}, res[:])
				if err != nil {
					t.Errorf("%s: Take: %v", name, err)
				}
				if ok {
					allowed.Add(1)
				}
			})
		}
		before := sent.Load()
		take()
		redisstore.WaitFor(t, name+": the first take sent", func() bool { return sent.Load() > before })
		for range 63 {
			take()
		}
		redisstore.WaitFor(t, name+": 63 takes queued", func() bool { return redisstore.Queued(st) == 63 })
		srv.Resume()
		wg.Wait()
		return allowed.Load()
	}

	if got := run("warm"); got != l.Burst {
		t.Fatalf("allowed %d of 64, want exactly %d", got, l.Burst)
	}
	if p := pc.pipes.Load(); p != 1 {
		t.Fatalf("64 queued takes went out in %d pipelines, want 1 (the first take alone, then the 63 queued)", p)
	}
	if got := pc.take(); got["evalsha"] != 2 || got["eval"] != 0 {
		t.Fatalf("commands %v, want 2 evalsha for 64 takes: the first alone, the 63 queued merged", got)
	}

	srv.ScriptFlush()
	if got := run("flushed"); got != l.Burst {
		t.Fatalf("after SCRIPT FLUSH: allowed %d of 64, want exactly %d", got, l.Burst)
	}
	got := pc.take()
	if got["evalsha"] != 2 || got["eval"] < 1 || got["eval"] > 2 {
		t.Fatalf("after SCRIPT FLUSH: commands %v, want 2 evalsha and a re-send by eval of those answered NOSCRIPT", got)
	}
}

// TestBatchingCloseAndCancel: a batched take whose caller's context ends
// while Redis stalls returns the context's error while Redis is still
// stalled (its client would wait 30 s for the reply: a take that waited
// for Redis instead of its context would not return within the test's 10
// s); after Redis resumes the store takes again, and after Close a take
// is refused, saying the store is closed, and Close again does nothing.
func TestBatchingCloseAndCancel(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t, redistest.WithClientTimeouts(time.Second, 30*time.Second))
	st, err := redisstore.New(srv.NewClient(), redisstore.WithBatching(1, 8))
	if err != nil {
		t.Fatal(err)
	}
	bs := []quota.Bucket{bucket("bc", tb100, 1)}
	var res [1]quota.Result

	srv.Pause()
	done := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
		defer cancel()
		var res [1]quota.Result
		_, err := st.Take(ctx, bs, res[:])
		done <- err
	}()
	select {
	case err = <-done:
	case <-time.After(10 * time.Second):
		srv.Resume()
		t.Fatal("a Take whose context ended did not return within 10s while Redis stayed paused")
	}
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Take with an expiring context on a paused Redis: %v, want DeadlineExceeded", err)
	}
	srv.Resume()

	if ok, err := st.Take(context.Background(), bs, res[:]); err != nil || !ok {
		t.Fatalf("Take after resume: %v %v", ok, err)
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Take(context.Background(), bs, res[:]); err == nil || !strings.Contains(err.Error(), "closed") {
		t.Fatalf("Take after Close: %v, want an error saying the store is closed", err)
	}
	if err := st.Close(); err != nil { // idempotent
		t.Fatal(err)
	}
}

// TestBatchingOptions: batching is on by default for every client kind,
// cluster included; WithBatching(0, 0) turns it off (no goroutine to
// stop) and half-off settings are refused.
func TestBatchingOptions(t *testing.T) {
	// Nothing listens on port 1 of loopback; one dial, refused, each time.
	c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{"127.0.0.1:1"}, ContextTimeoutEnabled: true, DialerRetries: 1, MaxRetries: -1})
	defer c.Close()
	for _, opts := range [][]redisstore.Option{nil, {redisstore.WithBatching(1, 8)}} {
		st, err := redisstore.New(c, opts...)
		if err != nil {
			t.Fatalf("New(cluster, %d options): %v", len(opts), err)
		}
		if !redisstore.Batched(st) {
			t.Fatalf("New(cluster, %d options) is not batched", len(opts))
		}
		if err := st.Close(); err != nil {
			t.Fatal(err)
		}
	}
	st, err := redisstore.New(c, redisstore.WithBatching(0, 0))
	if err != nil {
		t.Fatal(err)
	}
	if redisstore.Batched(st) {
		t.Fatal("WithBatching(0, 0) is batched")
	}
	if n := flushers(); n != 0 {
		t.Fatalf("%d flusher goroutines after Close", n)
	}
	for _, bad := range [][2]int{{0, 8}, {8, 0}, {-1, 4}} {
		if _, err := redisstore.New(c, redisstore.WithBatching(bad[0], bad[1])); err == nil {
			t.Fatalf("WithBatching(%d, %d) accepted", bad[0], bad[1])
		}
	}
}

// flushers counts the running batcher goroutines of every store.
func flushers() int {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			return strings.Count(string(buf[:n]), "redisstore.(*batcher).loop")
		}
		buf = make([]byte, 2*len(buf))
	}
}

// TestBatchingStopsWithoutClose: a batched store dropped without Close
// stops its flushers once it is garbage collected, and Close stops them
// at once.
func TestBatchingStopsWithoutClose(t *testing.T) {
	srv := redistest.Start(t)
	c := srv.NewClient()
	base := flushers()
	func() {
		st, err := redisstore.New(c, redisstore.WithBatching(3, 8))
		if err != nil {
			t.Fatal(err)
		}
		if ok, _ := mustTake(t, st, []quota.Bucket{bucket("drop", tb100, 1)}); !ok {
			t.Fatal("take denied")
		}
		if n := flushers() - base; n != 3 {
			t.Fatalf("%d flushers running, want 3", n)
		}
	}()
	deadline := time.Now().Add(5 * time.Second)
	for flushers() > base {
		if time.Now().After(deadline) {
			t.Fatalf("%d flushers still running 5s after the store was dropped", flushers()-base)
		}
		runtime.GC()
		time.Sleep(10 * time.Millisecond)
	}
	// Counted again: a store another test dropped without Close may have
	// been collected meanwhile, taking its flushers with it.
	base = flushers()
	st, err := redisstore.New(c)
	if err != nil {
		t.Fatal(err)
	}
	if n := flushers() - base; n != 2 {
		t.Fatalf("default store runs %d flushers, want WithBatching's default, 2", n)
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	if n := flushers(); n > base {
		t.Fatalf("%d flushers after Close, want at most %d", n, base)
	}
}

// TestBatchingCluster: takes that queue while every master is paused
// leave in one pipeline, the takes of each master merged into one script
// call (routed to that master; several slots of one master in one
// nodeScript call): the first take sent alone before the others start,
// then the 59 queued behind it (all queued before the masters resume:
// events, not sleeps, order them). Every slot admits exactly its burst;
// and after SCRIPT FLUSH on every node the batches are re-sent by EVAL
// without failing a take. A cluster of its own: it pauses every master
// and empties their script caches.
func TestBatchingCluster(t *testing.T) {
	wait := redistest.StartClusterAsync(t)
	t.Parallel()
	cl := wait()
	redisstore.PausesHeld(t, cl)
	c := cl.Client()
	pc := &pipeCounter{counter: counter{n: map[string]int{}}}
	c.AddHook(pc)
	var sent atomic.Int64
	c.AddHook(scriptHook{func(redis.Cmder) { sent.Add(1) }})
	clk := clock.New(time.Time{})
	st := fakeTimeStore(t, c, clk, redisstore.WithBatching(1, 64))
	l := quota.Limit{Algorithm: quota.GCRA, Rate: 1, Period: time.Hour, Burst: 10}
	tags := []string{"{bc=a}", "{bc=b}", "{bc=c}"}
	masters := map[string]bool{}
	for _, tag := range tags {
		m, err := c.MasterForKey(context.Background(), tag)
		if err != nil {
			t.Fatal(err)
		}
		masters[m.Options().Addr] = true
	}

	run := func(name string) map[string]int64 {
		t.Helper()
		pc.take()
		pc.pipes.Store(0)
		for _, n := range cl.Nodes() {
			n.Pause()
		}
		var mu sync.Mutex
		allowed := map[string]int64{}
		var wg sync.WaitGroup
		take := func(g int) {
			wg.Go(func() {
				key := tags[g%len(tags)] + name
				var res [1]quota.Result
				ok, err := st.Take(context.Background(), []quota.Bucket{bucket(key, l, 1)}, res[:])
				if err != nil {
					t.Errorf("%s: Take: %v", name, err)
				}
				if ok {
					mu.Lock()
					allowed[key]++
					mu.Unlock()
				}
			})
		}
		before := sent.Load()
		take(0)
		redisstore.WaitFor(t, name+": the first take sent", func() bool { return sent.Load() > before })
		for g := 1; g < 60; g++ {
			take(g)
		}
		redisstore.WaitFor(t, name+": 59 takes queued", func() bool { return redisstore.Queued(st) == 59 })
		for _, n := range cl.Nodes() {
			n.Resume()
		}
		wg.Wait()
		return allowed
	}
	check := func(name string, allowed map[string]int64) {
		t.Helper()
		for _, tag := range tags {
			if got := allowed[tag+name]; got != l.Burst {
				t.Fatalf("%s: slot of %s allowed %d of 20, want exactly %d", name, tag, got, l.Burst)
			}
		}
	}
	check("warm", run("warm"))
	got := pc.take()
	if p := pc.pipes.Load(); p != 1 {
		t.Fatalf("60 queued takes went out in %d pipelines, want 1 (the first take alone, then the 59 queued)", p)
	}
	// The first take alone, then one merged call per master.
	if want := 1 + len(masters); got["evalsha"] != want || got["eval"] != 0 {
		t.Fatalf("commands %v, want %d evalsha for 60 takes over 3 slots of %d masters", got, want, len(masters))
	}

	cl.ScriptFlush()
	check("flushed", run("flushed"))
	got = pc.take()
	if want := 1 + len(masters); got["evalsha"] != want || got["eval"] < 1 || got["eval"] > got["evalsha"] {
		t.Fatalf("after SCRIPT FLUSH: commands %v, want %d evalsha and a re-send by eval of those answered NOSCRIPT", got, want)
	}
}
