package redisstore_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/floodgate-go/floodgate/testing/clock"
	"github.com/floodgate-go/floodgate/testing/redistest"
	"github.com/floodgate-go/floodgate/tiers"
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
	l := tiers.Limit{Algorithm: tiers.GCRA, Rate: 1, Period: time.Hour, Burst: 40}

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
				var res [1]tiers.Result
				ok, err := st.Take(context.Background(), []tiers.Bucket{bucket("batch:"+name, l, 1)}, res[:])
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
	bs := []tiers.Bucket{bucket("bc", tb100, 1)}
	var res [1]tiers.Result

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

func TestBatchingRejectedOnCluster(t *testing.T) {
	c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{"127.0.0.1:1"}})
	defer c.Close()
	if _, err := redisstore.New(c, redisstore.WithBatching(1, 8)); err == nil || !strings.Contains(err.Error(), "Cluster") {
		t.Fatalf("WithBatching on a cluster client: %v, want an error", err)
	}
	if _, err := redisstore.New(c, redisstore.WithBatching(0, 8)); err == nil {
		t.Fatal("WithBatching(0, 8) accepted")
	}
}
