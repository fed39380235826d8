package fleetshed_test

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/fleet"
	"github.com/floodgate-go/floodgate/shedder/fleetshed"
	"github.com/floodgate-go/floodgate/testing/clock"
	"github.com/floodgate-go/floodgate/testing/redistest"
)

// Two instances of one service share their in-flight counts through Redis
// so that the whole fleet keeps 20% of its capacity for critical traffic:
// with 8 of the fleet's 10 in flight, spread over both, either instance
// sheds a read and still admits a critical request. Each Sync is also a
// heartbeat of the instance's fleet.Members, which then counts both. (A
// service calls Run in a goroutine instead of Sync, and chains the
// Shedder before the local shedder.)
func ExampleNew() {
	addr, stop, err := redistest.StartProcess() // a real redis-server on a free loopback port
	if err != nil {
		log.Fatal(err)
	}
	defer stop()
	ctx := context.Background()
	clk := clock.New(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)) // fake time: the output never varies

	instance := func(id string) (*fleet.Members, *fleetshed.Shedder) {
		client := redis.NewClient(&redis.Options{Addr: addr})
		m, err := fleet.New(client, fleet.WithInstanceID(id), fleet.WithClock(clk))
		if err != nil {
			log.Fatal(err)
		}
		s, err := fleetshed.New(m, 10) // the whole fleet serves 10 in flight
		if err != nil {
			log.Fatal(err)
		}
		return m, s
	}
	membersA, a := instance("a")
	_, b := instance("b")

	for range 5 {
		a.Admit(ctx, &floodgate.Request{Priority: floodgate.PriorityRead}) // held: their Dones come later
	}
	for range 3 {
		b.Admit(ctx, &floodgate.Request{Priority: floodgate.PriorityWrite})
	}
	for _, s := range []*fleetshed.Shedder{a, b, a} { // a syncs last, and sees b
		if err := s.Sync(ctx); err != nil {
			log.Fatal(err)
		}
	}
	fmt.Println("live instances:", membersA.Count())
	for _, s := range []*fleetshed.Shedder{a, b} {
		for _, p := range []floodgate.Priority{floodgate.PriorityRead, floodgate.PriorityCritical} {
			d, done, err := s.Admit(ctx, &floodgate.Request{Priority: p})
			fmt.Printf("%-8s allowed=%v policy=%q limit=%d remaining=%d err=%v\n", p, d.Allowed, d.Policy, d.Limit, d.Remaining, err)
			if done != nil {
				done(floodgate.Result{})
			}
		}
	}
	// Output:
	// live instances: 2
	// read     allowed=false policy="fleet-shedder" limit=10 remaining=2 err=<nil>
	// critical allowed=true policy="" limit=10 remaining=1 err=<nil>
	// read     allowed=false policy="fleet-shedder" limit=10 remaining=2 err=<nil>
	// critical allowed=true policy="" limit=10 remaining=1 err=<nil>
}
