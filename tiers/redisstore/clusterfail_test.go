package redisstore_test

import (
	"context"
	"errors"
	"fmt"
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

// TestClusterFailover kills (SIGKILL) one master of a 3-master cluster
// with a replica each while four concurrent callers take through one
// store, batched (the default), over a client built by NewClient: two
// callers take the same 3 levels on the master that dies, one takes 2
// levels on a master that lives, and one takes a level on each (a
// multi-slot take). The cluster fails over by itself (cluster-node-timeout
// 1000 ms: the replica is promoted 1.5–3 s after the kill, which keeps
// the test short; CLUSTER FAILOVER TAKEOVER would skip the failure
// detection this test is about). It asserts:
//
//   - Failures only in the window. No take fails before the kill, and none
//     later than 2 s after the replica is seen promoted (go-redis reloads
//     the slot map within about 200 ms; the 2 s are for a loaded host).
//     The surviving master's takes fail only with CLUSTERDOWN (every node
//     refuses every slot from the moment the dead master is marked failed
//     until its replica is promoted, as cluster-require-full-coverage,
//     on by default, asks): refusals, charged nowhere, so its buckets hold
//     exactly what was admitted.
//   - Lost units bounded by what was not replicated. On each bucket of the
//     dead master, the promoted replica holds at least what was admitted
//     before a WAIT the dead master acknowledged just before the kill,
//     plus everything the new master admitted; what it lacks is at most
//     what the old master admitted between that WAIT and its death. It
//     holds at most what was admitted plus the takes whose failure left it
//     unknown whether they ran (a reply lost with the connection).
//   - Recovery. Every caller's takes succeed again, and keep succeeding,
//     once the slot map is reloaded; the time from the kill is logged.
//   - The new master is used. Takes after the promotion change the state
//     on the promoted replica.
func TestClusterFailover(t *testing.T) {
	const nodeTimeout = 1000 * time.Millisecond
	cl := redistest.StartClusterWithReplicas(t, redistest.WithArgs("--cluster-node-timeout", strconv.Itoa(int(nodeTimeout/time.Millisecond))))
	addrs := cl.Addrs()
	uc, err := redisstore.NewClient("redis+cluster://" + addrs[0] + "?addr=" + addrs[1] + "&addr=" + addrs[2] +
		"&dial_timeout=1s&read_timeout=2s&write_timeout=2s")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = uc.Close() })
	c := uc.(*redis.ClusterClient)
	st, err := redisstore.New(c)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	ctx := context.Background()

	// The victim is the master of {fa}; tagB is a tag on another master.
	shards, err := c.ClusterShards(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	masterOf := func(slot int) string {
		for _, sh := range shards {
			for _, r := range sh.Slots {
				if int64(slot) < r.Start || int64(slot) > r.End {
					continue
				}
				for _, nd := range sh.Nodes {
					if nd.Role == "master" {
						return net.JoinHostPort(nd.IP, strconv.FormatInt(nd.Port, 10))
					}
				}
			}
		}
		return ""
	}
	const tagA = "{fa}"
	victimAddr := masterOf(redisstore.Slot(tagA))
	tagB := ""
	for i := 0; i < 100 && tagB == ""; i++ {
		if tag := fmt.Sprintf("{fb%d}", i); masterOf(redisstore.Slot(tag)) != victimAddr {
			tagB = tag
		}
	}
	var victim, heir *redistest.Server
	for i, n := range cl.Nodes() {
		if n.Addr() == victimAddr {
			victim, heir = n, cl.Replicas()[i]
		}
	}
	if victim == nil || tagB == "" {
		t.Fatalf("no master found for %s (%q), or no tag on another master", tagA, victimAddr)
	}

	const burst = 1_000_000
	lim := quota.Limit{Algorithm: quota.GCRA, Rate: 1, Period: time.Hour, Burst: burst}
	b := func(key string) quota.Bucket { return quota.Bucket{Key: key, Cost: 1, Limit: lim} }
	user := []quota.Bucket{b(tagA + ":user:1"), b(tagA + ":user:1:search"), b(tagA + ":ip:1")}
	callers := []*failCaller{
		{name: "dying-1", buckets: user},
		{name: "dying-2", buckets: user},
		{name: "surviving", buckets: []quota.Bucket{b(tagB + ":user:2"), b(tagB + ":ip:2")}},
		{name: "spanning", buckets: []quota.Bucket{b(tagA + ":tenant:3"), b(tagB + ":tenant:3")}},
	}
	dying, surviving, spanning := callers[:2], callers[2:3], callers[3:]
	// The buckets, each with the callers that charge it and whether it
	// lives on the victim.
	ledgers := []struct {
		bucket  quota.Bucket
		callers []*failCaller
		onDead  bool
	}{
		{user[0], dying, true}, {user[1], dying, true}, {user[2], dying, true},
		{surviving[0].buckets[0], surviving, false}, {surviving[0].buckets[1], surviving, false},
		{spanning[0].buckets[0], spanning, true}, {spanning[0].buckets[1], spanning, false},
	}
	admitted := func(fcs []*failCaller) int64 {
		var n int64
		for _, fc := range fcs {
			n += fc.admitted.Load()
		}
		return n
	}
	snapshot := func() []int64 {
		out := make([]int64, len(ledgers))
		for i, l := range ledgers {
			out[i] = admitted(l.callers)
		}
		return out
	}
	take := func(fc *failCaller) {
		res := make([]quota.Result, len(fc.buckets))
		tctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		ok, err := st.Take(tctx, fc.buckets, res)
		cancel()
		fc.record(ok, err, time.Now())
	}
	for _, fc := range callers { // every key exists, and is replicated
		for range 20 {
			take(fc)
		}
	}

	var stop atomic.Bool
	var wg sync.WaitGroup
	for _, fc := range callers {
		wg.Go(func() {
			for i := 0; i < 500_000 && !stop.Load(); i++ {
				take(fc)
				if fc.failing() {
					time.Sleep(time.Millisecond) // as a caller's backoff would
				}
			}
		})
	}
	halt := func() {
		stop.Store(true)
		wg.Wait()
	}
	time.Sleep(300 * time.Millisecond) // the callers are under way

	// Everything admitted before the WAIT is on the replica once WAIT
	// answers 1; what is admitted after it, until the kill, may not be.
	// WAIT waits for the replication offset of its own connection's last
	// write, so that connection writes first (in the victim's slot): the
	// offset then covers every take admitted before.
	replicated := snapshot()
	if err := victim.Client().Set(ctx, tagA+":wait-mark", 1, time.Minute).Err(); err != nil {
		halt()
		t.Fatalf("SET on the victim: %v", err)
	}
	if n, err := victim.Client().Do(ctx, "WAIT", 1, 2000).Int(); err != nil || n != 1 {
		halt()
		t.Fatalf("WAIT on the victim: %d replicas, %v", n, err)
	}
	killedAt := time.Now()
	victim.Kill()

	// Until the promotion no take reaches a master of the victim's slots:
	// the last count read while the heir is still a replica is everything
	// the old master admitted.
	var atDeath []int64
	var promotedAt time.Time
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		n := snapshot()
		info, err := heir.Client().Info(ctx, "replication").Result()
		if err != nil {
			continue
		}
		if strings.Contains(info, "role:master") {
			promotedAt = time.Now()
			break
		}
		atDeath = n
	}
	if promotedAt.IsZero() || atDeath == nil {
		halt()
		t.Fatalf("the replica of %s was not seen a replica and then promoted within 20 s of the kill", victimAddr)
	}

	// Every caller succeeds again, and keeps succeeding for 500 ms.
	recovered := false
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline) && !recovered; time.Sleep(50 * time.Millisecond) {
		recovered = true
		for _, fc := range callers {
			lastOK, lastErr := fc.times()
			recovered = recovered && lastOK.After(promotedAt) && lastOK.After(lastErr) && time.Since(lastErr) > 500*time.Millisecond
		}
	}
	halt()
	t.Logf("killed %s; its replica promoted %s after the kill (node timeout %s)", victimAddr, promotedAt.Sub(killedAt).Round(time.Millisecond), nodeTimeout)
	var lastFail time.Time
	for _, fc := range callers {
		fc.mu.Lock()
		t.Logf("%s: %d admitted, %d failed (%d refused, ran nowhere; %d unsure), from +%s to +%s after the kill: %v",
			fc.name, fc.admitted.Load(), fc.refused.Load()+fc.unsure.Load(), fc.refused.Load(), fc.unsure.Load(),
			since(killedAt, fc.firstErr), since(killedAt, fc.lastErr), fc.errs)
		first, last := fc.firstErr, fc.lastErr
		fc.mu.Unlock()
		if fc.denied.Load() != 0 {
			t.Errorf("%s: %d takes denied against a burst no run can spend", fc.name, fc.denied.Load())
		}
		if !first.IsZero() && first.Before(killedAt) {
			t.Errorf("%s: a take failed %s before the kill", fc.name, killedAt.Sub(first))
		}
		if last.After(promotedAt.Add(2 * time.Second)) {
			t.Errorf("%s: a take failed %s after the promotion: the store did not follow the new master", fc.name, last.Sub(promotedAt))
		}
		if last.After(lastFail) {
			lastFail = last
		}
	}
	if !recovered {
		t.Fatal("the callers did not all take successfully again within 10 s of the promotion")
	}
	t.Logf("recovery: the last failed take ended %s after the kill, %s after the promotion was seen",
		lastFail.Sub(killedAt).Round(time.Millisecond), lastFail.Sub(promotedAt).Round(time.Millisecond))
	sv := surviving[0]
	sv.mu.Lock()
	for msg := range sv.errs {
		if !strings.Contains(msg, "CLUSTERDOWN") {
			t.Errorf("surviving: a take on the master that lives failed with %q, not CLUSTERDOWN", msg)
		}
	}
	sv.mu.Unlock()

	// What each bucket holds against what was admitted.
	unsure := func(fcs []*failCaller) (n int64) {
		for _, fc := range fcs {
			n += fc.unsure.Load()
		}
		return n
	}
	failed := func(fcs []*failCaller) (n int64) {
		for _, fc := range fcs {
			n += fc.unsure.Load() + fc.refused.Load()
		}
		return n
	}
	final := snapshot()
	for i, l := range ledgers {
		peek := l.bucket
		peek.Cost = 0
		var res [1]quota.Result
		if _, err := st.Take(ctx, []quota.Bucket{peek}, res[:]); err != nil {
			t.Fatalf("%s: %v", l.bucket.Key, err)
		}
		charged := burst - res[0].Remaining
		total := final[i]
		if !l.onDead {
			// A refused take charged nothing; a spanning take refused in
			// the victim's slot had its charge here refunded (a refund
			// that fails is that take's error).
			hi := total + unsure(l.callers)
			if l.callers[0] == spanning[0] {
				hi = total + failed(l.callers)
			}
			t.Logf("%s (master that lives): %d admitted, %d charged", l.bucket.Key, total, charged)
			if charged < total || charged > hi {
				t.Errorf("%s: %d charged for %d admitted (at most %d with the failures that may have charged)", l.bucket.Key, charged, total, hi)
			}
			continue
		}
		unreplicated := atDeath[i] - replicated[i]
		byNew := total - atDeath[i]
		lost := total - charged
		t.Logf("%s (dead master): %d admitted (%d replicated before the kill, %d more by the old master, %d by the new one), %d charged on the new master: %d lost",
			l.bucket.Key, total, replicated[i], unreplicated, byNew, charged, lost)
		if charged < replicated[i]+byNew {
			t.Errorf("%s: %d charged < %d replicated before the kill + %d admitted by the new master: more lost than was unreplicated", l.bucket.Key, charged, replicated[i], byNew)
		}
		if hi := total + unsure(l.callers); charged > hi {
			t.Errorf("%s: %d charged for %d admitted and %d takes that may have run", l.bucket.Key, charged, total, unsure(l.callers))
		}
	}

	// Takes now change the state on the promoted replica.
	state := func() string {
		v, err := heir.Client().Get(ctx, user[0].Key).Result()
		if err != nil {
			t.Fatalf("the promoted replica has no state for %s: %v", user[0].Key, err)
		}
		return v
	}
	s0 := state()
	for range 10 {
		var res [3]quota.Result
		if ok, err := st.Take(ctx, user, res[:]); !ok || err != nil {
			t.Fatalf("take after the failover: %v %v", ok, err)
		}
	}
	if state() == s0 {
		t.Fatal("takes after the failover did not change the state on the promoted replica")
	}
}

// since formats at relative to t0, or "-" when at is zero.
func since(t0, at time.Time) string {
	if at.IsZero() {
		return "-"
	}
	return at.Sub(t0).Round(time.Millisecond).String()
}

// failCaller is one caller of TestClusterFailover: its take and what
// became of its takes.
type failCaller struct {
	name    string
	buckets []quota.Bucket

	admitted, denied atomic.Int64
	// refused counts takes that failed with an error reply or never
	// reached a server (the dial failed): they ran nowhere. unsure counts
	// the other failures (a connection lost after the write, a timeout):
	// they may have run.
	refused, unsure atomic.Int64

	mu                        sync.Mutex
	firstErr, lastErr, lastOK time.Time
	errs                      map[string]int // by message, addresses elided
}

func (c *failCaller) record(ok bool, err error, at time.Time) {
	switch {
	case err == nil && ok:
		c.admitted.Add(1)
	case err == nil:
		c.denied.Add(1)
	default:
		var reply redis.Error
		var op *net.OpError
		if errors.As(err, &reply) || (errors.As(err, &op) && op.Op == "dial") {
			c.refused.Add(1)
		} else {
			c.unsure.Add(1)
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if err == nil {
		c.lastOK = at
		return
	}
	if c.firstErr.IsZero() {
		c.firstErr = at
	}
	c.lastErr = at
	msg := err.Error()
	if i := strings.Index(msg, "127.0.0.1:"); i >= 0 {
		msg = msg[:i] + "ADDR"
	}
	if c.errs == nil {
		c.errs = map[string]int{}
	}
	c.errs[msg]++
}

// failing reports whether the caller's last take failed.
func (c *failCaller) failing() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.lastErr.After(c.lastOK)
}

// times returns when the caller's last take succeeded and last failed.
func (c *failCaller) times() (lastOK, lastErr time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.lastOK, c.lastErr
}
