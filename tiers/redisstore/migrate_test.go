package redisstore_test

import (
	"context"
	"errors"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/floodgate-go/floodgate/quota"
	"github.com/floodgate-go/floodgate/testing/redistest"
	"github.com/floodgate-go/floodgate/tiers/redisstore"
)

// TestClusterSlotMigration moves the slot of a 4-level take to another
// master while 5 concurrent callers keep taking, batched (the default):
// the slot goes MIGRATING and IMPORTING, its keys move one MIGRATE at a
// time (so some are on the new master before the others), then every
// master is told its new owner, as `redis-cli --cluster reshard` does.
// The client follows the redirects (ASK, TRYAGAIN, MOVED: each comes
// before the script runs): no take fails, and a take is charged exactly
// when it is admitted. With a burst no run can spend, admitted plus what
// each level still holds is exactly the burst, and the state is on its
// new master.
func TestClusterSlotMigration(t *testing.T) {
	cl := redistest.StartCluster(t)
	c := cl.Client()
	st, err := redisstore.New(c)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	ctx := context.Background()
	// One take of four levels in one slot, as a policy's levels sharing a
	// hash tag are: moved key by key, some of its keys are on the new
	// master before the others (Redis answers TRYAGAIN meanwhile).
	const burst = 1_000_000
	lim := quota.Limit{Algorithm: quota.GCRA, Rate: 1, Period: time.Hour, Burst: burst}
	bs := []quota.Bucket{
		{Key: "{mig}:user:7", Cost: 1, Limit: lim},
		{Key: "{mig}:user:7:search", Cost: 1, Limit: lim},
		{Key: "{mig}:ip:7", Cost: 1, Limit: lim},
		{Key: "{mig}:key:7", Cost: 1, Limit: lim},
	}
	key := bs[0].Key
	var admitted, denied, failed, during atomic.Int64
	var moving, moved atomic.Bool
	take := func() {
		var res [4]quota.Result
		ok, err := st.Take(ctx, bs, res[:])
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
		keys, err := srcC.ClusterGetKeysInSlot(ctx, int(slot), 1).Result()
		must(err)
		if len(keys) == 0 {
			break
		}
		args := []any{"MIGRATE", host, port, "", 0, 5000, "KEYS"}
		for _, k := range keys {
			args = append(args, k)
		}
		must(srcC.Do(ctx, args...).Err())
		time.Sleep(5 * time.Millisecond) // takes meet the keys half moved
	}
	time.Sleep(20 * time.Millisecond) // takes meet the keys moved, the slot not yet
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

	// Whatever failed during the move charged nothing, on every level.
	var res [4]quota.Result
	peek := append([]quota.Bucket(nil), bs...)
	for i := range peek {
		peek[i].Cost = 0
	}
	if _, err := st.Take(ctx, peek, res[:]); err != nil {
		t.Fatal(err)
	}
	for i, r := range res {
		if got := admitted.Load() + r.Remaining; got != burst {
			t.Fatalf("%s: admitted %d with %d remaining: %d, not the burst of %d (a take charged twice, or charged and failed)", bs[i].Key, admitted.Load(), r.Remaining, got, burst)
		}
	}
	if n, err := dstC.Exists(ctx, key).Result(); err != nil || n != 1 {
		t.Fatalf("the key is not on its new master (%d, %v)", n, err)
	}
}

type node struct{ id, addr string }

// owners returns the master serving slot and another master.
func owners(t *testing.T, c *redis.ClusterClient, slot int) (src, dst node) {
	t.Helper()
	shards, err := c.ClusterShards(context.Background()).Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, sh := range shards {
		var n node
		for _, nd := range sh.Nodes {
			if nd.Role == "master" {
				n = node{id: nd.ID, addr: net.JoinHostPort(nd.IP, strconv.FormatInt(nd.Port, 10))}
			}
		}
		serves := false
		for _, r := range sh.Slots {
			serves = serves || (int64(slot) >= r.Start && int64(slot) <= r.End)
		}
		if serves {
			src = n
		} else if dst.id == "" {
			dst = n
		}
	}
	if src.id == "" || dst.id == "" || src.id == dst.id {
		t.Fatal(errors.New("no two masters found"))
	}
	return src, dst
}
