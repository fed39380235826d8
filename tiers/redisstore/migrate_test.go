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
// new master. Takes meet every stage of the move: before each next step
// the test waits until the callers have made more takes, or (keys half
// moved) until Redis has answered TRYAGAIN: events, not sleeps. A cluster
// of its own: it moves a slot.
//
// A call refused TRYAGAIN is sent again 4 times, after 8, 16, 32 and
// 64 ms, then fails. On a busy machine the test's MIGRATEs may leave the
// keys half moved longer than those 120 ms: a take refused throughout
// then fails, charging nothing, as documented (runScript). Such failures
// are allowed when the keys were half moved that long, and no other.
func TestClusterSlotMigration(t *testing.T) {
	wait := redistest.StartClusterAsync(t)
	t.Parallel()
	cl := wait()
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
	var admitted, denied, failed, refused, during, takes atomic.Int64
	var moving, moved atomic.Bool
	take := func() {
		defer takes.Add(1)
		var res [4]quota.Result
		ok, err := st.Take(ctx, bs, res[:])
		switch {
		case err != nil && strings.Contains(err.Error(), "TRYAGAIN"):
			refused.Add(1)
		case err != nil:
			failed.Add(1)
			t.Logf("take failed: %v", err)
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

	// TRYAGAIN answers, each a call Redis refused with the keys half moved.
	tryAgain := &replies{prefix: "TRYAGAIN"}
	c.AddHook(tryAgain)

	// 5 callers take until the slot has moved (at most 20 000 takes each).
	var wg sync.WaitGroup
	for range 5 {
		wg.Go(func() {
			for i := 0; i < 20_000 && !moved.Load(); i++ {
				take()
			}
		})
	}
	defer func() { // the callers stop, also when the test fails
		moved.Store(true)
		wg.Wait()
	}()
	srcC, dstC := redis.NewClient(&redis.Options{Addr: src.addr}), redis.NewClient(&redis.Options{Addr: dst.addr})
	defer srcC.Close()
	defer dstC.Close()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	// more waits until the callers have made n takes more.
	more := func(n int64, what string) {
		t.Helper()
		from := takes.Load()
		redisstore.WaitFor(t, what, func() bool { return takes.Load() >= from+n })
	}
	more(10, "the callers under way")
	moving.Store(true)
	must(dstC.Do(ctx, "CLUSTER", "SETSLOT", slot, "IMPORTING", src.id).Err())
	must(srcC.Do(ctx, "CLUSTER", "SETSLOT", slot, "MIGRATING", dst.id).Err())
	more(10, "takes meeting the slot half moved")
	host, port, _ := strings.Cut(dst.addr, ":")
	halfFrom := time.Now()
	for first := true; ; first = false {
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
		if first {
			from := tryAgain.n.Load()
			redisstore.WaitFor(t, "a take meeting the keys half moved (TRYAGAIN)", func() bool { return tryAgain.n.Load() > from })
		}
	}
	halfMoved := time.Since(halfFrom)
	more(10, "takes meeting the keys moved, the slot not yet")
	for _, n := range cl.Nodes() {
		nc := redis.NewClient(&redis.Options{Addr: n.Addr()})
		must(nc.Do(ctx, "CLUSTER", "SETSLOT", slot, "NODE", dst.id).Err())
		_ = nc.Close()
	}
	more(10, "takes meeting the slot moved")
	moving.Store(false)
	moved.Store(true)
	wg.Wait()
	t.Logf("admitted %d, denied %d, failed %d, refused TRYAGAIN to the end %d (keys half moved for %s); %d takes while the slot moved, %d TRYAGAIN answers",
		admitted.Load(), denied.Load(), failed.Load(), refused.Load(), halfMoved.Round(time.Millisecond), during.Load(), tryAgain.n.Load())
	if during.Load() == 0 {
		t.Fatal("no take while the slot moved")
	}
	if n := refused.Load(); n != 0 && halfMoved < 120*time.Millisecond {
		t.Fatalf("%d takes failed TRYAGAIN with the keys half moved for only %s: the refused calls were not sent again", n, halfMoved)
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

// replies is a go-redis hook that counts the replies, to commands sent on
// their own or in a pipeline, that are errors starting with prefix.
type replies struct {
	prefix string
	n      atomic.Int64
}

func (r *replies) DialHook(next redis.DialHook) redis.DialHook { return next }

func (r *replies) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		r.note(cmd)
		return err
	}
}

func (r *replies) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		err := next(ctx, cmds)
		for _, cmd := range cmds {
			r.note(cmd)
		}
		return err
	}
}

func (r *replies) note(cmd redis.Cmder) {
	if err := cmd.Err(); err != nil && strings.HasPrefix(err.Error(), r.prefix) {
		r.n.Add(1)
	}
}
