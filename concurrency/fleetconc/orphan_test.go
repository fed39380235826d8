package fleetconc_test

import (
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/concurrency"
	"github.com/floodgate-go/floodgate/concurrency/fleetconc"
	"github.com/floodgate-go/floodgate/testing/clock"
	"github.com/floodgate-go/floodgate/testing/redistest"
)

// slowRedisAcquire makes one fleet acquire time out on the client
// while Redis still runs the script once it answers again (a slow Redis,
// the failure mode OnError is for). It returns the limiter's decision and
// Done, and the fleet count of alice once Redis has caught up.
func slowRedisAcquire(t *testing.T, failClosed bool) (*instance, *instance, floodgate.Decision, floodgate.Done, error) {
	t.Helper()
	srv := redistest.Start(t)
	clk := clock.New(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC))
	mk := func() *instance {
		return newInstance(t, []concurrency.Option{concurrency.WithGlobal(10)}, fleetconc.WithClock(clk),
			fleetconc.WithPerKey(fleetconc.PerKey{
				Name: "fleet-user", Cap: 1, Key: byUser, Client: srv.NewClient(),
				Lease: 30 * time.Second, Timeout: 100 * time.Millisecond, FailClosed: failClosed,
			}))
	}
	a, b := mk(), mk()
	alice := req("/m", "", "alice")
	// Load the script (EVALSHA then works) and check the key is free.
	_, done := mustAdmit(t, a, alice)
	done(floodgate.Result{})

	srv.Pause() // Redis stalls: the EVALSHA is sent but not answered in time
	d, done, err := a.Admit(ctx, alice)
	srv.Resume()
	return a, b, d, done, err
}

// waitFleetCount polls (bounded: 50 x 20ms) until alice's fleet count is
// want or the time is up, and returns the last count.
func waitFleetCount(t *testing.T, l *instance, want int64) int64 {
	t.Helper()
	var n int64
	for range 50 {
		n = fleetCount(t, l, "alice")
		if n == want {
			return n
		}
		time.Sleep(20 * time.Millisecond)
	}
	return n
}

// FailOpen: a Redis that answers too late admits the request "without a
// fleet slot", but the script still runs and adds the slot; once the
// request is done the slot is removed (it was held by no request for a
// whole lease before, and the key's next request was denied).
func TestFleetTimedOutAcquireLeavesNoSlotFailOpen(t *testing.T) {
	a, b, d, done, err := slowRedisAcquire(t, false)
	if !d.Allowed || d.Source != floodgate.SourceFailOpen || err == nil || done == nil {
		t.Fatalf("slow Redis, fail open: %+v, %v; want admitted from fail_open with an error", d, err)
	}
	done(floodgate.Result{}) // the request ends: it must hold nothing now
	if a.InFlight() != 0 {
		t.Fatalf("global in flight %d, want 0", a.InFlight())
	}
	// Give Redis time to run the stalled command, then expect no slot.
	time.Sleep(200 * time.Millisecond)
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
	a, b, d, done, err := slowRedisAcquire(t, true)
	if d.Allowed || d.Source != floodgate.SourceFailClosed || err == nil || done != nil {
		t.Fatalf("slow Redis, fail closed: %+v, %v; want denied from fail_closed with an error", d, err)
	}
	time.Sleep(200 * time.Millisecond)
	if n := waitFleetCount(t, a, 0); n != 0 {
		t.Errorf("alice's fleet count = %d after a denied request, want 0: the timed-out acquire left a slot in Redis for a whole lease", n)
	}
	if d, dn, err := b.Admit(ctx, req("/m", "", "alice")); !d.Allowed {
		t.Errorf("with nothing in flight, instance b is denied alice: %+v, %v (phantom slot)", d, err)
	} else if dn != nil {
		dn(floodgate.Result{})
	}
}
