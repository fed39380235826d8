//go:build system

package fleetconc_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/concurrency/fleetconc"
	"github.com/floodgate-go/floodgate/testing/redistest"
)

// The system tier of package fleetconc: what runs on real time against
// a real redis-server.

// TestFleetRunRenews: Run renews leases in the background (real time,
// Redis TIME): a request held for more than two leases keeps its slot,
// and once it ends the slot goes to another instance. Run renews every
// third of the 1s lease, so a slot outlives a renewal that comes up to
// two thirds of a lease late (its goroutine not run, or Redis not
// answering, for 667ms: with two CPU-bound processes beside the test a
// goroutine runs within milliseconds of when it was due), and every
// Redis call has half a lease (the cap's Timeout). Without renewals the
// slot is gone a lease after the request began.
func TestFleetRunRenews(t *testing.T) {
	srv := redistest.Start(t)
	const lease = time.Second
	mk := func() *instance {
		return newInstance(t, nil, fleetconc.WithPerKey(fleetconc.PerKey{
			Name: "fleet-user", Cap: 1, Key: byUser, Client: srv.NewClient(), Lease: lease, Timeout: lease / 2,
		}))
	}
	a, b := mk(), mk()
	runCtx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Go(func() { _ = a.fleet.Run(runCtx, func(err error) { t.Errorf("renew: %v", err) }) })
	alice := req("/m", "", "alice")
	_, long := mustAdmit(t, a, alice)
	time.Sleep(lease*2 + lease/3)
	mustDeny(t, b, alice)
	long(floodgate.Result{})
	_, done := mustAdmit(t, b, alice)
	done(floodgate.Result{})
	stop()
	wg.Wait()
}
