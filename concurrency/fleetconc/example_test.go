package fleetconc_test

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/concurrency/fleetconc"
	"github.com/floodgate-go/floodgate/testing/clock"
	"github.com/floodgate-go/floodgate/testing/redistest"
)

// A per-user cap of 2 in flight across the whole fleet, kept in Redis: two
// instances share it, so alice's third request is denied on either while
// bob is unaffected. Slots of an instance that crashes (its Dones never
// run) expire a lease later; in a service, Run renews the leases of long
// requests. The clock is fake so that the lease runs out at once.
func ExampleWithPerKey() {
	addr, stop, err := redistest.StartProcess() // a real redis-server on a free loopback port
	if err != nil {
		log.Fatal(err)
	}
	defer stop()
	ctx := context.Background()
	clk := clock.New(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC))

	instance := func() *fleetconc.Limiter {
		l, err := fleetconc.New(fleetconc.WithClock(clk), fleetconc.WithPerKey(fleetconc.PerKey{
			Name:   "fleet-per-user",
			Cap:    2,
			Key:    func(r *floodgate.Request) (string, bool) { return r.Identity.User, r.Identity.User != "" },
			Client: redis.NewClient(&redis.Options{Addr: addr}),
			Lease:  time.Minute,
		}))
		if err != nil {
			log.Fatal(err)
		}
		return l
	}
	a, b := instance(), instance()
	alice := &floodgate.Request{Identity: floodgate.Identity{User: "alice"}}
	bob := &floodgate.Request{Identity: floodgate.Identity{User: "bob"}}

	show := func(name string, l *fleetconc.Limiter, r *floodgate.Request) floodgate.Done {
		d, done, err := l.Admit(ctx, r)
		fmt.Printf("%-26s allowed=%-5v policy=%s limit=%d remaining=%d err=%v\n", name, d.Allowed, d.Policy, d.Limit, d.Remaining, err)
		return done
	}
	show("alice on a", a, alice) // a crashes holding both: these Dones never run
	show("alice on a", a, alice)
	show("alice on b", b, alice)
	if done := show("bob on b", b, bob); done != nil {
		done(floodgate.Result{})
	}
	clk.Advance(time.Minute) // a's leases run out
	show("alice on b, a lease later", b, alice)
	// Output:
	// alice on a                 allowed=true  policy=fleet-per-user limit=2 remaining=1 err=<nil>
	// alice on a                 allowed=true  policy=fleet-per-user limit=2 remaining=0 err=<nil>
	// alice on b                 allowed=false policy=fleet-per-user limit=2 remaining=0 err=<nil>
	// bob on b                   allowed=true  policy=fleet-per-user limit=2 remaining=1 err=<nil>
	// alice on b, a lease later  allowed=true  policy=fleet-per-user limit=2 remaining=1 err=<nil>
}
