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

// pipeCounter counts pipelines and the commands in them.
type pipeCounter struct {
	counter
	pipes atomic.Int64
}

func (p *pipeCounter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		p.pipes.Add(1)
		for _, cmd := range cmds {
			p.add(cmd.Name())
		}
		return next(ctx, cmds)
	}
}

// TestBatchingSharesPipelines: 64 takes that queue while Redis is paused
// leave in a few pipelines and a few merged script calls, not 64 round
// trips; every take is decided exactly (frozen clock: exactly the burst
// allowed), and after SCRIPT FLUSH a whole batch is re-sent by EVAL
// without failing a take.
func TestBatchingSharesPipelines(t *testing.T) {
	srv := redistest.Start(t)
	c := srv.NewClient()
	pc := &pipeCounter{counter: counter{n: map[string]int{}}}
	c.AddHook(pc)
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
		var wg, started sync.WaitGroup
		for g := 0; g < 64; g++ {
			wg.Add(1)
			started.Add(1)
			go func() {
				defer wg.Done()
				started.Done()
				var res [1]quota.Result
				ok, err := st.Take(context.Background(), []quota.Bucket{bucket("batch:"+name, l, 1)}, res[:])
				if err != nil {
					t.Errorf("%s: Take: %v", name, err)
				}
				if ok {
					allowed.Add(1)
				}
			}()
		}
		started.Wait()
		time.Sleep(200 * time.Millisecond) // let every started take queue
		srv.Resume()
		wg.Wait()
		return allowed.Load()
	}

	if got := run("warm"); got != l.Burst {
		t.Fatalf("allowed %d of 64, want exactly %d", got, l.Burst)
	}
	if p := pc.pipes.Load(); p > 4 {
		t.Fatalf("64 queued takes went out in %d pipelines, want at most 4", p)
	}
	// The first take usually leaves alone and the 63 queued behind it fill
	// one merged call (max 64); on a slow machine all 64 may queue before
	// the flusher wakes (one call), or a straggler may take a third.
	if got := pc.take(); got["evalsha"] < 1 || got["evalsha"] > 3 {
		t.Fatalf("commands %v, want 1 to 3 evalsha for 64 takes", got)
	}

	srv.ScriptFlush()
	if got := run("flushed"); got != l.Burst {
		t.Fatalf("after SCRIPT FLUSH: allowed %d of 64, want exactly %d", got, l.Burst)
	}
	got := pc.take()
	if got["evalsha"] < 1 || got["evalsha"] > 3 || got["eval"] < 1 || got["eval"] > got["evalsha"] {
		t.Fatalf("after SCRIPT FLUSH: commands %v, want 1 to 3 evalsha and a re-send by eval of those answered NOSCRIPT", got)
	}
}

func TestBatchingCloseAndCancel(t *testing.T) {
	srv := redistest.Start(t)
	st, err := redisstore.New(srv.NewClient(), redisstore.WithBatching(1, 8))
	if err != nil {
		t.Fatal(err)
	}
	bs := []quota.Bucket{bucket("bc", tb100, 1)}
	var res [1]quota.Result

	// A caller whose context ends while Redis stalls gets its context's
	// error, promptly.
	srv.Pause()
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	start := time.Now()
	_, err = st.Take(ctx, bs, res[:])
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Take with an expiring context on a paused Redis: %v, want DeadlineExceeded", err)
	}
	if el := time.Since(start); el > time.Second {
		t.Fatalf("cancelled Take returned after %s", el)
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
	c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{"127.0.0.1:1"}, ContextTimeoutEnabled: true})
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
	for flushers() != base {
		if time.Now().After(deadline) {
			t.Fatalf("%d flushers still running 5s after the store was dropped", flushers()-base)
		}
		runtime.GC()
		time.Sleep(10 * time.Millisecond)
	}
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
	if n := flushers(); n != base {
		t.Fatalf("%d flushers after Close, want %d", n, base)
	}
}

// TestBatchingCluster: takes that queue while every master is paused leave
// in a few pipelines, the takes of each slot merged into few script calls
// (each routed to its slot's master); every slot admits exactly its burst;
// and after SCRIPT FLUSH on every node the batches are re-sent by EVAL
// without failing a take.
func TestBatchingCluster(t *testing.T) {
	cl := redistest.StartCluster(t)
	c := cl.Client()
	pc := &pipeCounter{counter: counter{n: map[string]int{}}}
	c.AddHook(pc)
	clk := clock.New(time.Time{})
	st := fakeTimeStore(t, c, clk, redisstore.WithBatching(1, 64))
	l := quota.Limit{Algorithm: quota.GCRA, Rate: 1, Period: time.Hour, Burst: 10}
	tags := []string{"{bc=a}", "{bc=b}", "{bc=c}"}

	run := func(name string) map[string]int64 {
		t.Helper()
		pc.take()
		pc.pipes.Store(0)
		for _, n := range cl.Nodes() {
			n.Pause()
		}
		var mu sync.Mutex
		allowed := map[string]int64{}
		var wg, started sync.WaitGroup
		for g := 0; g < 60; g++ {
			wg.Add(1)
			started.Add(1)
			go func() {
				defer wg.Done()
				started.Done()
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
			}()
		}
		started.Wait()
		time.Sleep(200 * time.Millisecond) // let every started take queue
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
	if p := pc.pipes.Load(); p > 4 {
		t.Fatalf("60 queued takes went out in %d pipelines, want at most 4", p)
	}
	// The first take usually leaves alone; the 59 queued behind it fill one
	// pipeline of one merged call per slot (a straggler may take another).
	if got["evalsha"] < 3 || got["evalsha"] > 9 {
		t.Fatalf("commands %v, want 3 to 9 evalsha for 60 takes over 3 slots", got)
	}

	cl.ScriptFlush()
	check("flushed", run("flushed"))
	got = pc.take()
	if got["evalsha"] < 3 || got["evalsha"] > 9 || got["eval"] < 1 || got["eval"] > got["evalsha"] {
		t.Fatalf("after SCRIPT FLUSH: commands %v, want 3 to 9 evalsha and a re-send by eval of those answered NOSCRIPT", got)
	}
}
