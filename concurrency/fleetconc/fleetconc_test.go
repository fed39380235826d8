package fleetconc_test

import (
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/concurrency"
	"github.com/floodgate-go/floodgate/concurrency/fleetconc"
	"github.com/floodgate-go/floodgate/testing/clock"
	"github.com/floodgate-go/floodgate/testing/redistest"
)

const lease = 10 * time.Second

// fleetLimiter is one instance with a fleet cap of capN per user (its
// Timeout callTimeout), chained after a local Limiter built with local,
// if any.
func fleetLimiter(t *testing.T, c redis.UniversalClient, clk floodgate.Clock, capN int64, failClosed bool, local ...concurrency.Option) *instance {
	t.Helper()
	opts := []fleetconc.Option{fleetconc.WithPerKey(fleetconc.PerKey{
		Name: "fleet-user", Cap: capN, Key: byUser, Client: c, Lease: lease, Timeout: callTimeout, FailClosed: failClosed,
	})}
	if clk != nil {
		opts = append(opts, fleetconc.WithClock(clk))
	}
	return newInstance(t, local, opts...)
}

// twoLimiters starts a Redis and returns two instances "a" and "b" with a
// fail-open fleet cap of capN per user on it, on one fake clock.
func twoLimiters(t *testing.T, capN int64) (*clock.Fake, *instance, *instance) {
	t.Helper()
	srv := redistest.Start(t)
	clk := clock.New(time.Time{})
	return clk, fleetLimiter(t, srv.NewClient(), clk, capN, false), fleetLimiter(t, srv.NewClient(), clk, capN, false)
}

func fleetCount(t *testing.T, i *instance, user string) int64 {
	t.Helper()
	n, err := i.fleet.FleetInFlight(ctx, "fleet-user", user)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// Two instances share a per-user cap of 3 through one Redis; a's fleet
// cap is chained after its local global cap.
func TestFleetCapAcrossInstances(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	clk := clock.New(time.Time{})
	a := fleetLimiter(t, srv.NewClient(), clk, 3, false, concurrency.WithGlobal(100))
	b := fleetLimiter(t, srv.NewClient(), clk, 3, false)
	alice := req("/m", "", "alice")
	_, a1 := mustAdmit(t, a, alice)
	_, a2 := mustAdmit(t, a, alice)
	d, b1 := mustAdmit(t, b, alice)
	if d.Policy != "fleet-user" || d.Limit != 3 || d.Remaining != 0 {
		t.Fatalf("third slot: %+v, want fleet-user 3 remaining 0", d)
	}
	d, err := mustDeny(t, b, alice)
	want := floodgate.Decision{Stage: floodgate.StageConcurrency, Source: floodgate.SourceConcurrency,
		Policy: "fleet-user", Limit: 3, RetryAfter: concurrency.DefaultRetryAfter}
	if d != want || err != nil {
		t.Fatalf("fourth: %+v, %v; want %+v", d, err, want)
	}
	mustDeny(t, a, alice)
	if a.InFlight() != 2 {
		t.Fatalf("a's global in flight %d, want 2 (the denied request released its global slot)", a.InFlight())
	}
	_, bob := mustAdmit(t, b, req("/m", "", "bob"))

	a1(floodgate.Result{})
	if got := fleetCount(t, a, "alice"); got != 2 {
		t.Fatalf("alice fleet count after a1 = %d, want 2", got)
	}
	if a.InFlight() != 1 {
		t.Fatalf("a's global in flight %d after a1, want 1", a.InFlight())
	}
	// A fleet Done is idempotent: a second call of b1 (b has no local
	// stage, so b1 is the fleet Limiter's own Done) releases nothing else.
	b1(floodgate.Result{})
	b1(floodgate.Result{})
	if got := fleetCount(t, a, "alice"); got != 1 {
		t.Fatalf("alice fleet count after b1 twice = %d, want 1", got)
	}
	_, b1 = mustAdmit(t, b, alice)
	_, b2 := mustAdmit(t, b, alice)
	mustDeny(t, a, alice)
	for _, done := range []floodgate.Done{a2, b1, b2, bob} {
		done(floodgate.Result{})
	}
	for _, u := range []string{"alice", "bob"} {
		if n, err := srv.Client().ZCard(ctx, fleetconc.DefaultPrefix+"fleet-user:"+u).Result(); err != nil || n != 0 {
			t.Fatalf("%s's sorted set has %d members (err %v), want 0", u, n, err)
		}
	}
	if a.InFlight() != 0 {
		t.Fatalf("a's global in flight %d, want 0", a.InFlight())
	}
}

// An instance that dies holding slots frees them exactly one lease later.
func TestFleetCrashedInstanceSlotsExpire(t *testing.T) {
	t.Parallel()
	clk, a, b := twoLimiters(t, 2)
	alice := req("/m", "", "alice")
	mustAdmit(t, a, alice) // a crashes: these Dones are never called
	mustAdmit(t, a, alice)
	clk.Advance(lease - time.Millisecond)
	mustDeny(t, b, alice)
	clk.Advance(time.Millisecond)
	_, d1 := mustAdmit(t, b, alice)
	_, d2 := mustAdmit(t, b, alice)
	mustDeny(t, b, alice)
	d1(floodgate.Result{})
	d2(floodgate.Result{})
	if got := fleetCount(t, b, "alice"); got != 0 {
		t.Fatalf("alice fleet count %d, want 0", got)
	}
}

// Renew keeps a long request's slot past its first lease.
func TestFleetRenew(t *testing.T) {
	t.Parallel()
	clk, a, b := twoLimiters(t, 1)
	alice := req("/m", "", "alice")
	_, long := mustAdmit(t, a, alice)
	clk.Advance(lease - time.Millisecond)
	if err := a.fleet.Renew(ctx); err != nil {
		t.Fatal(err)
	}
	clk.Advance(lease - time.Millisecond) // 2 leases - 2ms after the start
	mustDeny(t, b, alice)
	clk.Advance(time.Millisecond) // one lease after the renewal
	_, other := mustAdmit(t, b, alice)
	// a's slot expired and went to b; a renewal must not resurrect it.
	if err := a.fleet.Renew(ctx); err != nil {
		t.Fatal(err)
	}
	if got := fleetCount(t, b, "alice"); got != 1 {
		t.Fatalf("alice fleet count after a stale renewal %d, want 1", got)
	}
	long(floodgate.Result{})
	other(floodgate.Result{})
}

func TestFleetFailModes(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	clk := clock.New(time.Time{})
	open := fleetLimiter(t, srv.NewClient(), clk, 1, false, concurrency.WithGlobal(10))
	closed := fleetLimiter(t, srv.NewClient(), clk, 1, true, concurrency.WithGlobal(10))
	srv.Kill()
	alice := req("/m", "", "alice")

	d, done, err := open.Admit(ctx, alice)
	if !d.Allowed || d.Source != floodgate.SourceFailOpen || err == nil || done == nil {
		t.Fatalf("fail open: %+v, %v; want allowed from fail_open with an error", d, err)
	}
	done(floodgate.Result{})
	if open.InFlight() != 0 {
		t.Fatalf("fail open: global in flight %d after Done, want 0", open.InFlight())
	}

	d, done, err = closed.Admit(ctx, alice)
	if d.Allowed || d.Source != floodgate.SourceFailClosed || err == nil || done != nil || d.RetryAfter != concurrency.DefaultRetryAfter {
		t.Fatalf("fail closed: %+v, %v; want denied from fail_closed with an error", d, err)
	}
	if closed.InFlight() != 0 {
		t.Fatalf("fail closed: global in flight %d, want 0 (released on deny)", closed.InFlight())
	}
}

// Without fleetconc.WithClock the scripts read Redis TIME.
func TestFleetRedisTime(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	a := fleetLimiter(t, srv.NewClient(), nil, 1, false)
	alice := req("/m", "", "alice")
	_, done := mustAdmit(t, a, alice)
	mustDeny(t, a, alice)
	if got := fleetCount(t, a, "alice"); got != 1 {
		t.Fatalf("fleet count %d, want 1", got)
	}
	done(floodgate.Result{})
	mustAdmit(t, a, alice)
}

// Two instances, 10 000 requests over 8 loops ending by return, panic and
// cancel: afterwards every local count is 0 and every Redis set is empty.
func TestFleetNoLeaks(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	clk := clock.New(time.Time{})
	ls := []*instance{
		fleetLimiter(t, srv.NewClient(), clk, 2, false, concurrency.WithGlobal(3),
			concurrency.WithPerKey(concurrency.PerKey{Name: "per-tenant", Cap: 2, Key: byTenant})),
		fleetLimiter(t, srv.NewClient(), clk, 2, false, concurrency.WithGlobal(3),
			concurrency.WithPerKey(concurrency.PerKey{Name: "per-tenant", Cap: 2, Key: byTenant})),
	}
	users := []string{"u0", "u1", "u2"}
	o := storm(func(w, n int) (floodgate.Admitter, *floodgate.Request) {
		return ls[w%2], req("/m", "t"+strconv.Itoa(n%2), users[n%len(users)])
	})
	if o.errs.Load() != 0 {
		t.Fatalf("%d admissions returned errors against a healthy Redis", o.errs.Load())
	}
	if o.served.Load()+o.denied.Load() != stormSize || o.served.Load() == 0 || o.denied.Load() == 0 {
		t.Fatalf("served %d denied %d, want both > 0 summing to %d", o.served.Load(), o.denied.Load(), stormSize)
	}
	for _, l := range ls {
		if l.InFlight() != 0 {
			t.Errorf("global in flight %d, want 0", l.InFlight())
		}
		// No per-tenant slot leaked: each tenant takes its whole cap of 2
		// again, on the local Limiter alone.
		for _, tenant := range []string{"t0", "t1"} {
			var dones []floodgate.Done
			for range 2 {
				d, done, err := l.local.Admit(ctx, req("/m", tenant, "x"))
				if !d.Allowed {
					t.Errorf("tenant %s: a per-tenant slot leaked: %+v, %v", tenant, d, err)
					continue
				}
				dones = append(dones, done)
			}
			for _, done := range dones {
				done(floodgate.Result{})
			}
		}
	}
	for _, u := range users {
		if n, err := srv.Client().ZCard(ctx, fleetconc.DefaultPrefix+"fleet-user:"+u).Result(); err != nil || n != 0 {
			t.Errorf("Redis set of %s has %d members (err %v), want 0", u, n, err)
		}
	}
	t.Logf("served %d, denied %d", o.served.Load(), o.denied.Load())
}

// The fleet cap works on Redis Cluster (each key is one Redis key, so no
// script crosses slots) and survives a flushed script cache (NOSCRIPT).
func TestFleetClusterAndNoScript(t *testing.T) {
	wait := redistest.StartClusterAsync(t) // forms while the tests before this one run
	t.Parallel()
	cl := wait()
	clk := clock.New(time.Time{})
	a := fleetLimiter(t, cl.Client(), clk, 1, true)
	b := fleetLimiter(t, cl.Client(), clk, 1, true)
	var dones []floodgate.Done
	for _, u := range []string{"alice", "bob", "carol", "dave"} {
		_, done := mustAdmit(t, a, req("/m", "", u))
		mustDeny(t, b, req("/m", "", u))
		dones = append(dones, done)
	}
	cl.ScriptFlush()
	mustDeny(t, b, req("/m", "", "alice"))
	for _, d := range dones {
		d(floodgate.Result{})
	}
	for _, u := range []string{"alice", "bob", "carol", "dave"} {
		_, done := mustAdmit(t, b, req("/m", "", u))
		done(floodgate.Result{})
		if n := fleetCount(t, b, u); n != 0 {
			t.Fatalf("%s: fleet count %d, want 0", u, n)
		}
	}
}

// A fleet cap that fails open names itself in the allow (no other cap took
// a slot), so that a Chain reports it, with its source, rather than the
// local stage before it.
func TestFailOpenNamesTheCap(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	open := fleetLimiter(t, srv.NewClient(), nil, 3, false, concurrency.WithGlobal(10))
	srv.Kill()
	d, done, err := open.Admit(ctx, req("/m", "", "alice"))
	want := floodgate.Decision{Allowed: true, Stage: floodgate.StageConcurrency, Source: floodgate.SourceFailOpen,
		Policy: "fleet-user", Limit: 3, Remaining: 3}
	if d != want || err == nil || done == nil {
		t.Fatalf("fail open: %+v, %v; want %+v with an error", d, err, want)
	}
	done(floodgate.Result{})
}
