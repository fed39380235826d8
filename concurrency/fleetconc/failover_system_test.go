//go:build system

package fleetconc_test

import (
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/concurrency/fleetconc"
	"github.com/floodgate-go/floodgate/testing/redistest"
)

// TestClusterFailoverFollowed: a fleet cap whose key lives on a Cluster
// master that dies follows the promoted replica within seconds, not at
// go-redis's next periodic slot reload (60 s): a failed call makes the
// client reload its slot map (internal/failover). Requests keep coming
// (fail closed, so a failed call is seen); the last failure must come
// within 5 s of the promotion, and every request after it succeed; the
// same for the renewal of a request held throughout (a pipeline).
func TestClusterFailoverFollowed(t *testing.T) {
	const nodeTimeout = time.Second
	cl := redistest.StartClusterWithReplicas(t, redistest.WithArgs("--cluster-node-timeout", strconv.Itoa(int(nodeTimeout/time.Millisecond))))
	c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cl.Addrs(), DialTimeout: 300 * time.Millisecond,
		ReadTimeout: 300 * time.Millisecond, WriteTimeout: 300 * time.Millisecond, MaxRetries: -1})
	t.Cleanup(func() { _ = c.Close() })
	const prefix = "fgfo:"
	f, err := fleetconc.New(fleetconc.WithPerKey(fleetconc.PerKey{
		Name: "fo", Cap: 1000, Key: byUser, Client: c, Prefix: prefix, Timeout: 500 * time.Millisecond, FailClosed: true,
	}))
	if err != nil {
		t.Fatal(err)
	}
	r := req("/m", "", "alice")
	// The master of the cap's key, and its replica.
	slot, err := c.ClusterKeySlot(ctx, prefix+"fo:alice").Result()
	if err != nil {
		t.Fatal(err)
	}
	vi := cl.MasterOf(slot)
	victim, heir := cl.Nodes()[vi], cl.Replicas()[vi]
	victimAddr := victim.Addr()

	var lastOK, lastFail atomic.Int64 // Unix ns
	var admitted, failed atomic.Int64
	var stop atomic.Bool
	var wg sync.WaitGroup
	wg.Go(func() {
		for i := 0; i < 1_000_000 && !stop.Load(); i++ {
			// A failed call fails closed: a deny, with the call's error.
			d, done, err := f.Admit(ctx, r)
			switch {
			case d.Allowed && err != nil:
				t.Errorf("Admit: allowed, and %v", err)
				return
			case d.Allowed:
				done(floodgate.Result{})
				admitted.Add(1)
				lastOK.Store(time.Now().UnixNano())
			default:
				failed.Add(1)
				lastFail.Store(time.Now().UnixNano())
				time.Sleep(5 * time.Millisecond) // as a caller's backoff would
			}
		}
	})
	// A request held throughout, its slot (on the victim too) renewed in
	// a pipeline.
	holder := ""
	for i := 0; i < 1000 && holder == ""; i++ {
		u := "bob" + strconv.Itoa(i)
		if s, err := c.ClusterKeySlot(ctx, prefix+"fo:"+u).Result(); err == nil && cl.MasterOf(s) == vi {
			holder = u
		}
	}
	if holder == "" {
		t.Fatal("no user key on the victim's master")
	}
	_, held, err := f.Admit(ctx, req("/m", "", holder))
	if err != nil || held == nil {
		t.Fatalf("the held request: %v", err)
	}
	var renewOK, renewFail atomic.Int64
	wg.Go(func() {
		for i := 0; i < 100_000 && !stop.Load(); i++ {
			if err := f.Renew(ctx); err != nil {
				renewFail.Store(time.Now().UnixNano())
			} else {
				renewOK.Store(time.Now().UnixNano())
			}
			time.Sleep(20 * time.Millisecond)
		}
	})
	defer func() { stop.Store(true); wg.Wait(); held(floodgate.Result{}) }()
	for deadline := time.Now().Add(10 * time.Second); admitted.Load() < 20; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("no 20 requests admitted through the cap within 10 s")
		}
	}
	killedAt := time.Now()
	victim.Kill()
	var promotedAt time.Time
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline) && promotedAt.IsZero(); time.Sleep(20 * time.Millisecond) {
		if info, err := heir.Client().Info(ctx, "replication").Result(); err == nil && strings.Contains(info, "role:master") {
			promotedAt = time.Now()
		}
	}
	if promotedAt.IsZero() {
		t.Fatal("the replica was not promoted within 20 s of the kill")
	}
	// Recovered: admitted after the promotion, no failure for 500 ms.
	recovered := false
	for deadline := time.Now().Add(15 * time.Second); time.Now().Before(deadline) && !recovered; time.Sleep(50 * time.Millisecond) {
		ok, fail := lastOK.Load(), lastFail.Load()
		rok, rfail := renewOK.Load(), renewFail.Load()
		recovered = ok > promotedAt.UnixNano() && ok > fail && time.Since(time.Unix(0, fail)) > 500*time.Millisecond &&
			rok > promotedAt.UnixNano() && rok > rfail && time.Since(time.Unix(0, rfail)) > 500*time.Millisecond
	}
	last, lastRenew := time.Unix(0, lastFail.Load()), time.Unix(0, renewFail.Load())
	t.Logf("killed %s; replica promoted %s after; last failed acquire %s after the promotion (%d admitted, %d failed), last failed renewal %s after it",
		victimAddr, promotedAt.Sub(killedAt).Round(time.Millisecond), last.Sub(promotedAt).Round(time.Millisecond), admitted.Load(), failed.Load(),
		lastRenew.Sub(promotedAt).Round(time.Millisecond))
	if !recovered || last.After(promotedAt.Add(5*time.Second)) || lastRenew.After(promotedAt.Add(5*time.Second)) {
		t.Fatalf("the cap did not follow the promoted replica: last failures %s (acquire) and %s (renewal) after the promotion (recovered: %v)",
			last.Sub(promotedAt), lastRenew.Sub(promotedAt), recovered)
	}
}
