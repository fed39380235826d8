package redisstore_test

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/floodgate-go/floodgate/quota"
	"github.com/floodgate-go/floodgate/testing/redistest"
	"github.com/floodgate-go/floodgate/tiers/redisstore"
)

// sends is a go-redis hook that records what a client sends: the name of
// each command sent on its own, and the size of each pipeline.
type sends struct {
	mu    sync.Mutex
	alone []string
	pipes []int
}

func (s *sends) DialHook(next redis.DialHook) redis.DialHook { return next }

func (s *sends) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		s.mu.Lock()
		s.alone = append(s.alone, cmd.Name())
		s.mu.Unlock()
		return next(ctx, cmd)
	}
}

func (s *sends) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		s.mu.Lock()
		s.pipes = append(s.pipes, len(cmds))
		s.mu.Unlock()
		return next(ctx, cmds)
	}
}

// take returns what was recorded and forgets it.
func (s *sends) take() (alone []string, pipes []int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	alone, pipes, s.alone, s.pipes = s.alone, s.pipes, nil, nil
	return alone, pipes
}

// TestClusterOnePipeline: a Report (and the Resolve of it) whose buckets
// span 40 slots of a 3-master cluster is one call per master (each
// master's slots merged into one reportNodeScript call, every slot still
// recorded on its own), all in one pipeline, which the cluster client
// splits into one round trip per master, instead of 40 calls sent one by
// one; every slot's call applies and charges its buckets. After SCRIPT
// FLUSH on every master, each call of the pipeline is answered NOSCRIPT
// (it did not run) and goes again on its own by EVAL, and applies once.
// Before the flush, a Settle over the 40 slots from an unbatched store is
// one pipeline of 40 settle.lua calls (one per slot); from the batched
// store (the default) its calls join the flushers' batches, a few sends
// in all; the units come back. A cluster of its own: it empties the
// masters' script caches.
func TestClusterOnePipeline(t *testing.T) {
	wait := redistest.StartClusterAsync(t)
	t.Parallel()
	cl := wait()
	c := cl.Client()
	st, err := redisstore.New(c)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	h := &sends{}
	c.AddHook(h)

	const slots = 40
	bs := make([]quota.Bucket, slots)
	for i := range bs {
		bs[i] = bucket(fmt.Sprintf("{rp%d}:k", i), big, int64(i+1))
	}
	masters := map[string]bool{}
	for _, b := range bs {
		m, err := c.MasterForKey(context.Background(), b.Key)
		if err != nil {
			t.Fatal(err)
		}
		masters[m.Options().Addr] = true
	}
	res := make([]quota.ReportResult, slots)
	onePipeline := func(op string, calls int) {
		t.Helper()
		if alone, pipes := h.take(); len(alone) != 0 || fmt.Sprint(pipes) != fmt.Sprint([]int{calls}) {
			t.Fatalf("%s over %d slots sent %v on their own and pipelines of %v; want one pipeline of %d calls", op, slots, alone, pipes, calls)
		}
	}
	for _, op := range []struct {
		name string
		f    func(context.Context, uint64, uint64, []quota.Bucket, []quota.ReportResult) error
	}{{"Report", st.Report}, {"Resolve", st.Resolve}} {
		if err := op.f(context.Background(), 7, 1, bs, res); err != nil {
			t.Fatalf("%s: %v", op.name, err)
		}
		for i, r := range res {
			if !r.Applied || r.Charged != int64(i+1) {
				t.Fatalf("%s, bucket %d: %+v, want applied, %d charged", op.name, i, r, i+1)
			}
		}
		onePipeline(op.name, len(masters))
	}

	// Unbatched, a Settle's calls go in one pipeline; batched (the
	// default), they join the flushers' batches, a few sends in all.
	unbatched, err := redisstore.New(c, redisstore.WithBatching(0, 0))
	if err != nil {
		t.Fatal(err)
	}
	settle := func(st *redisstore.Store, cost func(i int) int64) {
		t.Helper()
		sb := make([]quota.Bucket, slots)
		for i := range sb {
			sb[i] = bs[i]
			sb[i].Cost = cost(i)
		}
		if err := st.Settle(context.Background(), sb, make([]quota.Result, slots)); err != nil {
			t.Fatalf("Settle: %v", err)
		}
	}
	settle(unbatched, func(int) int64 { return 1 })
	onePipeline("Settle, unbatched", slots)
	settle(st, func(i int) int64 { return -int64(i + 2) })
	alone, pipes := h.take()
	calls := len(alone)
	for _, n := range pipes {
		calls += n
	}
	if calls != slots || len(alone)+len(pipes) > 8 {
		t.Fatalf("batched Settle over %d slots sent %v on their own and pipelines of %v; want its %d calls in at most 8 sends", slots, alone, pipes, slots)
	}
	for i := range bs {
		read := bs[i]
		read.Cost = 0
		if _, r := mustTake(t, st, []quota.Bucket{read}); r[0].Remaining != big.Capacity() {
			got := r[0].Remaining
			t.Fatalf("bucket %d reads %d after the Settle gave its charges back, want %d", i, got, big.Capacity())
		}
	}
	h.take() // forget the reads

	for _, n := range cl.Nodes() {
		if err := n.Client().ScriptFlush(context.Background()).Err(); err != nil {
			t.Fatal(err)
		}
	}
	if err := st.Report(context.Background(), 7, 2, bs, res); err != nil {
		t.Fatalf("Report after SCRIPT FLUSH: %v", err)
	}
	alone, pipes = h.take()
	if len(alone) != len(masters) || fmt.Sprint(pipes) != fmt.Sprint([]int{len(masters)}) {
		t.Fatalf("Report after SCRIPT FLUSH sent %d calls on their own and pipelines of %v; want a pipeline of %d, then each again by EVAL", len(alone), pipes, len(masters))
	}
	for _, name := range alone {
		if name != "eval" {
			t.Fatalf("a call answered NOSCRIPT went again as %q, want eval", name)
		}
	}
	for i, r := range res {
		if !r.Applied || r.Charged != int64(i+1) || r.Remaining != big.Capacity()-int64(i+1) {
			t.Fatalf("after SCRIPT FLUSH, bucket %d: %+v, want applied, %d charged, %d left", i, r, i+1, big.Capacity()-int64(i+1))
		}
	}
}

// TestClusterReportSlotMoved: a Report over two slots of one master is one
// node call; when one of its slots has moved to another master since the
// client read the slot map, the node call meets that slot's key, fails
// before it wrote anything, and each slot's call goes again on its own
// (the moved one following the redirection): both apply, each once. A
// cluster of its own: it moves a slot.
func TestClusterReportSlotMoved(t *testing.T) {
	wait := redistest.StartClusterAsync(t)
	t.Parallel()
	cl := wait()
	c := cl.Client()
	ctx := context.Background()
	st, err := redisstore.New(c)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	// two tags of one master
	master := func(key string) string {
		m, err := c.MasterForKey(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		return m.Options().Addr
	}
	x, y := "{mv=x}:k", ""
	for i := 0; i < 200 && y == ""; i++ {
		if k := fmt.Sprintf("{mv=y%d}:k", i); master(k) == master(x) && redisstore.Slot(k) != redisstore.Slot(x) {
			y = k
		}
	}
	if y == "" {
		t.Fatal("no two slots on one master")
	}
	// y's slot (empty) moves to another master; the client is not told.
	slot := redisstore.Slot(y)
	_, dst := owners(t, c, slot)
	for _, n := range cl.Nodes() {
		if err := n.Client().Do(ctx, "CLUSTER", "SETSLOT", slot, "NODE", dst.id).Err(); err != nil {
			t.Fatal(err)
		}
	}
	h := &sends{}
	c.AddHook(h)
	bs := []quota.Bucket{bucket(x, big, 3), bucket(y, big, 4)}
	res := make([]quota.ReportResult, 2)
	if err := st.Report(ctx, 9, 1, bs, res); err != nil {
		t.Fatalf("Report: %v", err)
	}
	for i, r := range res {
		if !r.Applied || r.Charged != bs[i].Cost || r.Remaining != big.Capacity()-bs[i].Cost {
			t.Fatalf("bucket %d: %+v, want applied, %d charged, %d left", i, r, bs[i].Cost, big.Capacity()-bs[i].Cost)
		}
	}
	if alone, pipes := h.take(); fmt.Sprint(alone) != "[evalsha]" || fmt.Sprint(pipes) != fmt.Sprint([]int{2}) {
		t.Fatalf("Report sent %v on their own and pipelines of %v; want the node call on its own, then the two slots' calls in one pipeline", alone, pipes)
	}
	if got := redisCount(t, dst.addr, y); got != 1 {
		t.Fatalf("%d keys of y's bucket on its new master, want 1", got)
	}
	for i, b := range bs {
		b.Cost = 0
		if _, r := mustTake(t, st, []quota.Bucket{b}); r[0].Remaining != big.Capacity()-bs[i].Cost {
			t.Fatalf("%s reads %d, want %d (charged once)", b.Key, r[0].Remaining, big.Capacity()-bs[i].Cost)
		}
	}
}

// redisCount returns how many of keys exist on the Redis at addr.
func redisCount(t *testing.T, addr string, keys ...string) int64 {
	t.Helper()
	rc := redis.NewClient(&redis.Options{Addr: addr})
	defer rc.Close()
	n, err := rc.Exists(context.Background(), keys...).Result()
	if err != nil {
		t.Fatal(err)
	}
	return n
}
