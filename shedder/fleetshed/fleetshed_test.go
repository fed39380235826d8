package fleetshed_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/fleet"
	"github.com/floodgate-go/floodgate/shedder/fleetshed"
	"github.com/floodgate-go/floodgate/testing/clock"
	"github.com/floodgate-go/floodgate/testing/redistest"
)

var ctx = context.Background()

const ttl = 3 * time.Second

// members returns the fleet.Members of instance id, beating every
// interval with the given TTL, on clk (nil: Redis TIME).
func members(t testing.TB, c redis.UniversalClient, clk floodgate.Clock, id string, interval, ttl time.Duration, extra ...fleet.Option) *fleet.Members {
	t.Helper()
	opts := append([]fleet.Option{fleet.WithInstanceID(id), fleet.WithHeartbeat(interval, ttl), fleet.WithTimeout(time.Second)}, extra...)
	if clk != nil {
		opts = append(opts, fleet.WithClock(clk))
	}
	m, err := fleet.New(c, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// newFleet returns an instance id of a fleet of capacity, reconfigured
// with cfg when given.
func newFleet(t *testing.T, c redis.UniversalClient, clk floodgate.Clock, id string, capacity int64, cfg ...fleetshed.Config) *fleetshed.Shedder {
	t.Helper()
	f, err := fleetshed.New(members(t, c, clk, id, 500*time.Millisecond, ttl), capacity)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range cfg {
		if err := f.Reconfigure(c); err != nil {
			t.Fatal(err)
		}
	}
	return f
}

// twoFleets starts a Redis and returns two instances "a" and "b" of a fleet
// of the given capacity on it, on one fake clock.
func twoFleets(t *testing.T, capacity int64) (*redistest.Server, *clock.Fake, *fleetshed.Shedder, *fleetshed.Shedder) {
	t.Helper()
	srv := redistest.Start(t)
	clk := clock.New(time.Time{})
	return srv, clk, newFleet(t, srv.NewClient(), clk, "a", capacity), newFleet(t, srv.NewClient(), clk, "b", capacity)
}

func mustSync(t *testing.T, fs ...*fleetshed.Shedder) {
	t.Helper()
	for _, f := range fs {
		if err := f.Sync(ctx); err != nil {
			t.Fatalf("sync %s: %v", f.InstanceID(), err)
		}
	}
}

// admitN admits n requests of priority p on f and returns their Dones; it
// fails the test if any is shed.
func admitN(t *testing.T, f *fleetshed.Shedder, p floodgate.Priority, n int) []floodgate.Done {
	t.Helper()
	var dones []floodgate.Done
	for i := range n {
		d, done, _ := f.Admit(ctx, &floodgate.Request{Priority: p})
		if !d.Allowed {
			t.Fatalf("%s: %s request %d of %d shed: %+v", f.InstanceID(), p, i+1, n, d)
		}
		dones = append(dones, done)
	}
	return dones
}

func admitted(t *testing.T, f *fleetshed.Shedder, p floodgate.Priority) (floodgate.Decision, bool) {
	t.Helper()
	d, done, _ := f.Admit(ctx, &floodgate.Request{Priority: p})
	if done != nil {
		done(floodgate.Result{})
	}
	return d, d.Allowed
}

func endAll(dones []floodgate.Done) {
	for _, d := range dones {
		d(floodgate.Result{})
	}
}

// Two instances sharing one real Redis keep 20% of the fleet capacity for
// critical traffic; when one stops refreshing its entry (it died), its share
// is freed exactly one TTL after its last sync.
func TestFleetReservesCriticalShare(t *testing.T) {
	t.Parallel()
	srv, clk, a, b := twoFleets(t, 10)
	if start, stop := a.Threshold(); start != 8 || stop != 7 {
		t.Fatalf("threshold = %d/%d, want 8/7 (capacity 10, reserve 20%%, band 5%% rounded up)", start, stop)
	}

	// Before any sync each instance knows only its own counts, and says so.
	d, done, err := a.Admit(ctx, &floodgate.Request{Priority: floodgate.PriorityCritical})
	if !d.Allowed || !errors.Is(err, fleetshed.ErrStale) {
		t.Fatalf("Admit before first sync: allowed=%v err=%v, want allowed with ErrFleetStale", d.Allowed, err)
	}
	done(floodgate.Result{})

	reads := admitN(t, a, floodgate.PriorityRead, 5)
	writes := admitN(t, b, floodgate.PriorityWrite, 3)
	mustSync(t, a, b, a)
	if got := a.OthersInFlight(floodgate.PriorityWrite); got != 3 {
		t.Fatalf("a sees %d writes elsewhere, want 3", got)
	}
	if got := b.OthersInFlight(floodgate.PriorityRead); got != 5 {
		t.Fatalf("b sees %d reads elsewhere, want 5", got)
	}

	// Fleet in flight is 8 = 80% of 10: non-critical is shed on both.
	for _, f := range []*fleetshed.Shedder{a, b} {
		for _, p := range []floodgate.Priority{floodgate.PriorityTest, floodgate.PriorityRead, floodgate.PriorityWrite, floodgate.PriorityUnspecified} {
			d, ok := admitted(t, f, p)
			if ok {
				t.Fatalf("%s: %s admitted at fleet in-flight 8 of 10", f.InstanceID(), p)
			}
			want := floodgate.Decision{Stage: floodgate.StageShedder, Source: floodgate.SourceShedder,
				Policy: "fleet-shedder", Limit: 10, Remaining: 2, RetryAfter: time.Second, Priority: d.Priority}
			if d != want {
				t.Fatalf("shed decision = %+v, want %+v", d, want)
			}
		}
	}
	// The reserved 20% (and beyond: critical is never shed) serves critical.
	crit := admitN(t, a, floodgate.PriorityCritical, 2)
	crit = append(crit, admitN(t, b, floodgate.PriorityCritical, 3)...)
	mustSync(t, a, b)
	if got := b.OthersInFlight(floodgate.PriorityCritical); got != 2 {
		t.Fatalf("b sees %d critical elsewhere, want 2", got)
	}
	endAll(crit)
	mustSync(t, a, b)

	// b ends one write: fleet in flight 7, inside the hysteresis band, so
	// a keeps shedding; one more ends: 6, below the band, a admits again.
	writes[0](floodgate.Result{})
	writes = writes[1:]
	mustSync(t, b, a)
	if _, ok := admitted(t, a, floodgate.PriorityTest); ok || !a.Shedding() {
		t.Fatal("a: test admitted at fleet in-flight 7, inside the band [7, 8)")
	}
	writes[0](floodgate.Result{})
	writes = writes[1:]
	mustSync(t, b, a)
	if _, ok := admitted(t, a, floodgate.PriorityTest); !ok || a.Shedding() {
		t.Fatal("a: test shed at fleet in-flight 6, below the band")
	}

	// a dies: it stops syncing with its 5 reads still counted in Redis.
	clk.Advance(ttl - time.Millisecond)
	mustSync(t, b)
	if got := b.OthersInFlight(floodgate.PriorityUnspecified); got != 5 {
		t.Fatalf("1ms before a's expiry b sees %d in flight elsewhere, want 5", got)
	}
	// b holds 1 write and a's 5 reads still count: two more, not three.
	two := admitN(t, b, floodgate.PriorityWrite, 2)
	if _, ok := admitted(t, b, floodgate.PriorityWrite); ok {
		t.Fatal("b admitted a write at fleet in-flight 8 while a's share is still counted")
	}
	endAll(two[1:]) // 7: inside the band, still shedding
	if _, ok := admitted(t, b, floodgate.PriorityWrite); ok {
		t.Fatal("b admitted a write at fleet in-flight 7 inside the band")
	}
	endAll(two[:1])
	clk.Advance(time.Millisecond)
	mustSync(t, b)
	if got := b.OthersInFlight(floodgate.PriorityUnspecified); got != 0 {
		t.Fatalf("at a's expiry b sees %d in flight elsewhere, want 0", got)
	}
	if n, err := srv.Client().HLen(ctx, b.CountsKey()).Result(); err != nil || n != 1 {
		t.Fatalf("fleet hash has %d entries (err %v), want 1 (a's expired entry deleted)", n, err)
	}
	// b holds 1 write; it can now take 7 more non-critical, not 8.
	more := admitN(t, b, floodgate.PriorityWrite, 7)
	if _, ok := admitted(t, b, floodgate.PriorityRead); ok {
		t.Fatal("b admitted a 9th non-critical request with threshold 8")
	}
	endAll(more)
	endAll(writes)
	endAll(reads)
}

// Leave frees an instance's share at once, without waiting for the TTL.
func TestFleetLeave(t *testing.T) {
	t.Parallel()
	_, _, a, b := twoFleets(t, 5)
	held := admitN(t, a, floodgate.PriorityWrite, 4)
	mustSync(t, a, b)
	if b.OthersInFlight(floodgate.PriorityUnspecified) != 4 {
		t.Fatalf("b sees %d, want 4", b.OthersInFlight(floodgate.PriorityUnspecified))
	}
	if _, ok := admitted(t, b, floodgate.PriorityWrite); ok {
		t.Fatal("b admitted a write at fleet in-flight 4 of threshold 4")
	}
	if err := a.Leave(ctx); err != nil {
		t.Fatal(err)
	}
	mustSync(t, b)
	if b.OthersInFlight(floodgate.PriorityUnspecified) != 0 {
		t.Fatalf("after a left b sees %d, want 0", b.OthersInFlight(floodgate.PriorityUnspecified))
	}
	endAll(held)
}

// When Redis is gone the last fleet counts stay in force for one TTL, then
// the Fleet fails open on its local counts and says so with every decision.
func TestFleetStaleFailsOpen(t *testing.T) {
	t.Parallel()
	srv, clk, a, b := twoFleets(t, 10)
	held := admitN(t, a, floodgate.PriorityRead, 8)
	mustSync(t, a, b)
	if _, _, err := b.Admit(ctx, &floodgate.Request{Priority: floodgate.PriorityRead}); err != nil {
		t.Fatalf("fresh counts: err = %v, want nil", err)
	}
	srv.Kill()
	clk.Advance(ttl - time.Millisecond)
	if err := b.Sync(ctx); err == nil {
		t.Fatal("Sync against a killed Redis returned nil")
	}
	if b.Stale() || b.OthersInFlight(floodgate.PriorityUnspecified) != 8 {
		t.Fatalf("within the TTL: stale=%v others=%d, want false, 8", b.Stale(), b.OthersInFlight(floodgate.PriorityUnspecified))
	}
	if _, ok := admitted(t, b, floodgate.PriorityRead); ok {
		t.Fatal("b admitted a read on last known fleet in-flight 8 of threshold 8")
	}
	clk.Advance(time.Millisecond)
	if err := b.Sync(ctx); err == nil {
		t.Fatal("Sync against a killed Redis returned nil")
	}
	d, done, err := b.Admit(ctx, &floodgate.Request{Priority: floodgate.PriorityRead})
	if !d.Allowed || !errors.Is(err, fleetshed.ErrStale) {
		t.Fatalf("after a TTL without Redis: allowed=%v err=%v, want allowed with ErrFleetStale", d.Allowed, err)
	}
	done(floodgate.Result{})
	endAll(held)
}

// Without fleet.WithClock the script reads Redis TIME; instances still see each
// other.
func TestFleetRedisTime(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	a := newFleet(t, srv.NewClient(), nil, "a", 10)
	b := newFleet(t, srv.NewClient(), nil, "b", 10)
	held := admitN(t, a, floodgate.PriorityTest, 4)
	mustSync(t, a, b)
	if got := b.OthersInFlight(floodgate.PriorityTest); got != 4 {
		t.Fatalf("b sees %d test requests elsewhere, want 4", got)
	}
	endAll(held)
}

// Two instances, each running its sync loop against a real Redis, serve
// 10 000 requests of mixed priorities ending by return, panic and cancel;
// afterwards every count is exactly 0, locally and in Redis.
func TestFleetNoLeaks(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	fleets := []*fleetshed.Shedder{
		newFleetReal(t, srv.NewClient(), "a"),
		newFleetReal(t, srv.NewClient(), "b"),
	}
	// a holds 5 critical requests (fleet threshold 5 of 6) throughout, so
	// non-critical requests are shed on a always and on b once it syncs.
	held := admitN(t, fleets[0], floodgate.PriorityCritical, 5)
	runCtx, stop := context.WithCancel(ctx)
	var runs sync.WaitGroup
	for _, f := range fleets {
		runs.Go(func() { _ = f.Run(runCtx, nil) })
	}

	const workers, perWorker = 8, 1250
	var served, shed atomic.Int64
	var wg sync.WaitGroup
	for w := range workers {
		f := fleets[w%2]
		wg.Go(func() {
			for i := range perWorker {
				n := w*perWorker + i
				rctx, cancel := context.WithCancel(ctx)
				func() {
					defer func() { _ = recover() }()
					d, done, _ := f.Admit(rctx, &floodgate.Request{Priority: floodgate.Priority(n % floodgate.NumPriorities)})
					if !d.Allowed {
						shed.Add(1)
						return
					}
					served.Add(1)
					defer done(floodgate.Result{})
					switch n % 3 {
					case 1:
						panic("handler panics")
					case 2:
						cancel()
						<-rctx.Done()
					}
					if n%97 == 0 {
						time.Sleep(50 * time.Microsecond) // let syncs see requests in flight
					}
				}()
				cancel()
			}
		})
	}
	wg.Wait()
	stop()
	runs.Wait()
	endAll(held)
	if served.Load()+shed.Load() != workers*perWorker || served.Load() == 0 || shed.Load() == 0 {
		t.Fatalf("served %d + shed %d, want %d with some of each", served.Load(), shed.Load(), workers*perWorker)
	}
	for _, f := range fleets {
		if got := f.LocalInFlight(floodgate.PriorityUnspecified); got != 0 {
			t.Errorf("%s: local in flight %d, want 0", f.InstanceID(), got)
		}
		for p := floodgate.PriorityTest; p <= floodgate.PriorityCritical; p++ {
			if got := f.LocalInFlight(p); got != 0 {
				t.Errorf("%s: local %s in flight %d, want 0", f.InstanceID(), p, got)
			}
		}
	}
	// Run left on stop; publish the final counts and read them back raw.
	mustSync(t, fleets...)
	vals, err := srv.Client().HGetAll(ctx, fleets[0].CountsKey()).Result()
	if err != nil {
		t.Fatal(err)
	}
	if len(vals) != 2 {
		t.Fatalf("fleet hash = %v, want entries for a and b", vals)
	}
	for id, v := range vals {
		if v != "0 0 0 0" {
			t.Errorf("Redis entry of %s = %q, want counts 0 0 0 0", id, v)
		}
	}
	t.Logf("served %d, shed %d", served.Load(), shed.Load())
}

func newFleetReal(t *testing.T, c redis.UniversalClient, id string) *fleetshed.Shedder {
	t.Helper()
	f, err := fleetshed.New(members(t, c, nil, id, 2*time.Millisecond, time.Second), 6)
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// The fleet shedder works on Redis Cluster (one key) and survives a flushed
// script cache (NOSCRIPT).
func TestFleetClusterAndNoScript(t *testing.T) {
	wait := redistest.StartClusterAsync(t) // forms while the tests before this one run
	t.Parallel()
	cl := wait()
	clk := clock.New(time.Time{})
	a := newFleet(t, cl.Client(), clk, "a", 10)
	b := newFleet(t, cl.Client(), clk, "b", 10)
	held := admitN(t, a, floodgate.PriorityWrite, 6)
	mustSync(t, a, b)
	cl.ScriptFlush()
	mustSync(t, a, b)
	if got := b.OthersInFlight(floodgate.PriorityWrite); got != 6 {
		t.Fatalf("b sees %d writes elsewhere, want 6", got)
	}
	endAll(held)
}

// TestFleetStaleWhileSyncWaits: the other instances' counts stop counting
// once they are a TTL old even while a Sync still waits on a slow Redis
// (or none runs): Admit decides on local counts and says so; they stayed
// in force until a Sync failed.
func TestFleetStaleWhileSyncWaits(t *testing.T) {
	t.Parallel()
	srv, clk, a, b := twoFleets(t, 10)
	held := admitN(t, a, floodgate.PriorityRead, 8)
	mustSync(t, a, b)
	if _, ok := admitted(t, b, floodgate.PriorityRead); ok {
		t.Fatal("b admitted a read on fleet in-flight 8 of threshold 8")
	}
	srv.Pause() // Redis stalls; no Sync of b completes
	defer srv.Resume()
	clk.Advance(ttl)
	d, done, err := b.Admit(ctx, &floodgate.Request{Priority: floodgate.PriorityRead})
	if !d.Allowed || !errors.Is(err, fleetshed.ErrStale) {
		t.Fatalf("a TTL after the last sync, with no Sync finished: allowed=%v err=%v, want allowed with ErrFleetStale", d.Allowed, err)
	}
	done(floodgate.Result{})
	srv.Resume()
	endAll(held)
}

// One liveness: a Sync is a heartbeat of the Shedder's fleet.Members (its
// Count and Stale follow it), an instance that only beats (its Members
// runs, no fleet shedder) counts in Count but adds nothing to the fleet's
// in-flight counts, and the counts of an instance that stopped beating go
// a TTL after its last beat, whichever loop beat for it.
func TestSyncIsAHeartbeat(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	clk := clock.New(time.Time{})
	ma := members(t, srv.NewClient(), clk, "a", 500*time.Millisecond, ttl)
	a, err := fleetshed.New(ma, 10)
	if err != nil {
		t.Fatal(err)
	}
	mb := members(t, srv.NewClient(), clk, "b", 500*time.Millisecond, ttl)
	b, err := fleetshed.New(mb, 10)
	if err != nil {
		t.Fatal(err)
	}
	mc := members(t, srv.NewClient(), clk, "c", 500*time.Millisecond, ttl) // beats only
	if !ma.Stale() {
		t.Fatal("a's Members is not stale before any beat")
	}
	held := admitN(t, b, floodgate.PriorityRead, 3)
	if err := mc.Beat(ctx); err != nil {
		t.Fatal(err)
	}
	mustSync(t, b, a)
	if ma.Count() != 3 || ma.Stale() {
		t.Fatalf("after a's Sync its Members counts %d (stale %v), want 3 live instances", ma.Count(), ma.Stale())
	}
	if got := a.OthersInFlight(floodgate.PriorityUnspecified); got != 3 {
		t.Fatalf("a sees %d in flight elsewhere, want b's 3 (c publishes none)", got)
	}
	// b's Members beats on (its Run), b's fleet shedder does not sync:
	// its counts stay in force while it is live.
	clk.Advance(ttl - time.Millisecond)
	if err := mb.Beat(ctx); err != nil {
		t.Fatal(err)
	}
	clk.Advance(time.Millisecond)
	mustSync(t, a)
	if got := a.OthersInFlight(floodgate.PriorityUnspecified); got != 3 {
		t.Fatalf("b beats on: a sees %d in flight elsewhere, want 3", got)
	}
	// b stops beating altogether: its counts go a TTL after its last beat,
	// which was 1ms before a's last Sync.
	clk.Advance(ttl - 2*time.Millisecond)
	mustSync(t, a)
	if got := a.OthersInFlight(floodgate.PriorityUnspecified); got != 3 {
		t.Fatalf("1ms before b's expiry a sees %d, want 3", got)
	}
	clk.Advance(time.Millisecond)
	mustSync(t, a)
	if got := a.OthersInFlight(floodgate.PriorityUnspecified); got != 0 {
		t.Fatalf("at b's expiry a sees %d, want 0", got)
	}
	if ma.Count() != 1 {
		t.Fatalf("a's Members counts %d, want 1 (b and c expired)", ma.Count())
	}
	endAll(held)
}
