package fleetconc_test

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/concurrency"
	"github.com/floodgate-go/floodgate/concurrency/fleetconc"
	"github.com/floodgate-go/floodgate/testing/clock"
	"github.com/floodgate-go/floodgate/testing/redistest"
)

// slowRedisAcquire makes one fleet acquire of instance a (Timeout 100ms)
// time out on the client while Redis still runs the script once it
// answers again (a slow Redis, the failure mode OnError is for). It
// returns once Redis has run the stalled acquire, with a, b (Timeout
// callTimeout: it calls a healthy Redis only), and a's decision and Done.
// The stalled acquire is a's first call of the script, on a connection
// already open: a connection opened to a stopped server would stall in
// its handshake, before the script call is written.
func slowRedisAcquire(t *testing.T, failClosed bool) (*instance, *instance, floodgate.Decision, floodgate.Done, error) {
	t.Helper()
	srv := redistest.Start(t)
	clk := clock.New(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC))
	mk := func(c redis.UniversalClient, timeout time.Duration) *instance {
		return newInstance(t, []concurrency.Option{concurrency.WithGlobal(10)}, fleetconc.WithClock(clk),
			fleetconc.WithPerKey(fleetconc.PerKey{
				Name: "fleet-user", Cap: 1, Key: byUser, Client: c,
				Lease: 30 * time.Second, Timeout: timeout, FailClosed: failClosed,
			}))
	}
	ca := srv.NewClient()
	if err := ca.Ping(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	a, b := mk(ca, 100*time.Millisecond), mk(srv.NewClient(), callTimeout)
	alice := req("/m", "", "alice")
	// Load the script (EVALSHA then works) and check the key is free.
	_, done := mustAdmit(t, b, alice)
	done(floodgate.Result{})

	ran := scriptCalls(t, srv)
	srv.Pause() // Redis stalls: the EVALSHA is sent but not answered in time
	d, done, err := a.Admit(ctx, alice)
	srv.Resume()
	waitScriptCalls(t, srv, ran+1) // Redis runs the stalled acquire
	return a, b, d, done, err
}

// scriptCalls returns how many EVALSHA calls srv has run (INFO
// commandstats): a fleet acquire is one, once its script is loaded.
func scriptCalls(t *testing.T, srv *redistest.Server) int64 {
	t.Helper()
	info, err := srv.Client().Info(ctx, "commandstats").Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(info, "\n") {
		if rest, ok := strings.CutPrefix(strings.TrimSpace(line), "cmdstat_evalsha:calls="); ok {
			calls, _, _ := strings.Cut(rest, ",")
			n, err := strconv.ParseInt(calls, 10, 64)
			if err != nil {
				t.Fatalf("INFO commandstats: %q", line)
			}
			return n
		}
	}
	return 0
}

// waitScriptCalls waits (bounded: 10s) until srv has run n EVALSHA calls.
func waitScriptCalls(t *testing.T, srv *redistest.Server, n int64) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); scriptCalls(t, srv) < n; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("Redis ran %d EVALSHA calls in 10s, want %d: the stalled acquire never ran", scriptCalls(t, srv), n)
		}
	}
}

// waitFleetCount polls (bounded: 10s) until alice's fleet count is want
// or the time is up, and returns the last count: a slot a cut-short
// acquire left is removed in the background, every 50ms.
func waitFleetCount(t *testing.T, l *instance, want int64) int64 {
	t.Helper()
	n := fleetCount(t, l, "alice")
	for deadline := time.Now().Add(10 * time.Second); n != want && time.Now().Before(deadline); n = fleetCount(t, l, "alice") {
		time.Sleep(5 * time.Millisecond)
	}
	return n
}

// FailOpen: a Redis that answers too late admits the request "without a
// fleet slot", but the script still runs and adds the slot; once the
// request is done the slot is removed (it was held by no request for a
// whole lease before, and the key's next request was denied).
func TestFleetTimedOutAcquireLeavesNoSlotFailOpen(t *testing.T) {
	t.Parallel()
	a, b, d, done, err := slowRedisAcquire(t, false)
	if !d.Allowed || d.Source != floodgate.SourceFailOpen || err == nil || done == nil {
		t.Fatalf("slow Redis, fail open: %+v, %v; want admitted from fail_open with an error", d, err)
	}
	done(floodgate.Result{}) // the request ends: it must hold nothing now
	if a.InFlight() != 0 {
		t.Fatalf("global in flight %d, want 0", a.InFlight())
	}
	if n := waitFleetCount(t, a, 0); n != 0 {
		t.Errorf("alice's fleet count = %d after the only request ended, want 0: the timed-out acquire left a slot in Redis for a whole lease", n)
	}
	if d, dn, err := b.Admit(ctx, req("/m", "", "alice")); !d.Allowed {
		t.Errorf("with nothing in flight, instance b is denied alice: %+v, %v (phantom slot)", d, err)
	} else if dn != nil {
		dn(floodgate.Result{})
	}
}

// FailClosed: the same stall denies the request; the slot Redis adds
// afterwards is removed too (it was never undone, and alice was denied
// fleet-wide for a lease with no request of hers in flight).
func TestFleetTimedOutAcquireLeavesNoSlotFailClosed(t *testing.T) {
	t.Parallel()
	a, b, d, done, err := slowRedisAcquire(t, true)
	if d.Allowed || d.Source != floodgate.SourceFailClosed || err == nil || done != nil {
		t.Fatalf("slow Redis, fail closed: %+v, %v; want denied from fail_closed with an error", d, err)
	}
	if n := waitFleetCount(t, a, 0); n != 0 {
		t.Errorf("alice's fleet count = %d after a denied request, want 0: the timed-out acquire left a slot in Redis for a whole lease", n)
	}
	if d, dn, err := b.Admit(ctx, req("/m", "", "alice")); !d.Allowed {
		t.Errorf("with nothing in flight, instance b is denied alice: %+v, %v (phantom slot)", d, err)
	} else if dn != nil {
		dn(floodgate.Result{})
	}
}
