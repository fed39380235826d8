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

	"github.com/floodgate-go/floodgate/testing/redistest"
	"github.com/floodgate-go/floodgate/tiers"
	"github.com/floodgate-go/floodgate/tiers/redisstore"
)

// TestClusterSlotMigration moves the slot of a key being charged to
// another master while concurrent callers keep taking from it, batched
// (the default): the slot goes MIGRATING and IMPORTING, its keys move with
// MIGRATE, then every master is told its new owner, as `redis-cli
// --cluster reshard` does. The client follows the redirects (ASK,
// TRYAGAIN and MOVED come before the script runs), and a take is charged
// exactly when it is admitted: with a burst no run can spend, admitted
// plus what the bucket still holds is exactly the burst, whatever failed
// meanwhile, and the key's state is on its new master.
func TestClusterSlotMigration(t *testing.T) {
	cl := redistest.StartCluster(t)
	c := cl.Client()
	st, err := redisstore.New(c)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	ctx := context.Background()
	const key = "{mig}:user:7"
	b := tiers.Bucket{Key: key, Cost: 1, Limit: tiers.Limit{Algorithm: tiers.GCRA, Rate: 1, Period: time.Hour, Burst: 200}}

	const burst = 1_000_000
	b.Limit.Burst = burst
	var admitted, denied, failed, during atomic.Int64
	var moving, moved atomic.Bool
	take := func() {
		var res [1]tiers.Result
		ok, err := st.Take(ctx, []tiers.Bucket{b}, res[:])
		switch {
		case err != nil:
			failed.Add(1)
		case ok:
			admitted.Add(1)
		default:
			denied.Add(1)
		}
		if moving.Load() {
			during.Add(1)
		}
	}
	for range 50 { // the key exists on its first master
		take()
	}

	slot, err := c.ClusterKeySlot(ctx, key).Result()
	if err != nil {
		t.Fatal(err)
	}
	src, dst := owners(t, c, int(slot))

	// 5 callers take until the slot has moved (at most 20 000 takes each).
	var wg sync.WaitGroup
	for range 5 {
		wg.Go(func() {
			for i := 0; i < 20_000 && !moved.Load(); i++ {
				take()
			}
		})
	}
	srcC, dstC := redis.NewClient(&redis.Options{Addr: src.addr}), redis.NewClient(&redis.Options{Addr: dst.addr})
	defer srcC.Close()
	defer dstC.Close()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(20 * time.Millisecond) // the callers are under way
	moving.Store(true)
	must(dstC.Do(ctx, "CLUSTER", "SETSLOT", slot, "IMPORTING", src.id).Err())
	must(srcC.Do(ctx, "CLUSTER", "SETSLOT", slot, "MIGRATING", dst.id).Err())
	time.Sleep(20 * time.Millisecond) // takes meet the slot half moved
	host, port, _ := strings.Cut(dst.addr, ":")
	for {
		keys, err := srcC.ClusterGetKeysInSlot(ctx, int(slot), 100).Result()
		must(err)
		if len(keys) == 0 {
			break
		}
		args := []any{"MIGRATE", host, port, "", 0, 5000, "KEYS"}
		for _, k := range keys {
			args = append(args, k)
		}
		must(srcC.Do(ctx, args...).Err())
	}
	time.Sleep(20 * time.Millisecond) // takes meet the key moved, the slot not yet
	for _, n := range cl.Nodes() {
		nc := redis.NewClient(&redis.Options{Addr: n.Addr()})
		must(nc.Do(ctx, "CLUSTER", "SETSLOT", slot, "NODE", dst.id).Err())
		_ = nc.Close()
	}
	time.Sleep(20 * time.Millisecond) // and the slot moved
	moving.Store(false)
	moved.Store(true)
	wg.Wait()
	t.Logf("admitted %d, denied %d, failed %d; %d takes while the slot moved", admitted.Load(), denied.Load(), failed.Load(), during.Load())
	if during.Load() == 0 {
		t.Fatal("no take while the slot moved")
	}
	if denied.Load() != 0 || failed.Load() != 0 {
		t.Fatalf("%d takes denied against a burst no run can spend, %d failed: redirects not followed", denied.Load(), failed.Load())
	}

	// Whatever failed during the move charged nothing.
	var res [1]tiers.Result
	peek := b
	peek.Cost = 0
	if _, err := st.Take(ctx, []tiers.Bucket{peek}, res[:]); err != nil {
		t.Fatal(err)
	}
	if got := admitted.Load() + res[0].Remaining; got != burst {
		t.Fatalf("admitted %d with %d remaining: %d, not the burst of %d (a take charged twice, or charged and failed)", admitted.Load(), res[0].Remaining, got, burst)
	}
	if n, err := dstC.Exists(ctx, key).Result(); err != nil || n != 1 {
		t.Fatalf("the key is not on its new master (%d, %v)", n, err)
	}
}

type node struct{ id, addr string }

// owners returns the master serving slot and another master.
func owners(t *testing.T, c *redis.ClusterClient, slot int) (src, dst node) {
	t.Helper()
	slots, err := c.ClusterSlots(context.Background()).Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range slots {
		n := node{id: s.Nodes[0].ID, addr: s.Nodes[0].Addr}
		if slot >= s.Start && slot <= s.End {
			src = n
		} else if dst.id == "" || dst.id == src.id {
			dst = n
		}
	}
	if src.id == "" || dst.id == "" || src.id == dst.id {
		t.Fatal(errors.New("no two masters found"))
	}
	return src, dst
}
