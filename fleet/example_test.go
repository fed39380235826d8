package fleet_test

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/floodgate-go/floodgate/fleet"
	"github.com/floodgate-go/floodgate/testing/redistest"
)

// A static count overrides the heartbeats: Count returns it and nothing is
// sent to Redis, so no client is needed. Consumers take m.Count as a
// func() int and split a fleet-wide limit by it.
func ExampleNew() {
	m, err := fleet.New(nil, fleet.WithStatic(4))
	if err != nil {
		log.Fatal(err)
	}
	var count func() int = m.Count // what the local-first and fallback stores take

	const fleetLimit = 1000 // requests per second for the whole fleet
	fmt.Println("live instances:", count())
	fmt.Println("this instance's share:", fleetLimit/count())
	fmt.Println("stale:", m.Stale())
	fmt.Println("beat:", m.Beat(context.Background()))
	// Output:
	// live instances: 4
	// this instance's share: 250
	// stale: false
	// beat: <nil>
}

// In a service, Run keeps the heartbeat going and leaves the fleet when
// its context ends: here three instances of one service share a real
// redis-server, each beating every 10ms, until all three count 3; then one
// stops, Run leaves for it, and the two others count 2 at their next beat,
// not a TTL (a minute) later.
func ExampleMembers_Run() {
	addr, stop, err := redistest.StartProcess() // a real redis-server on a free loopback port
	if err != nil {
		log.Fatal(err)
	}
	defer stop()
	// waitFor polls cond for up to 10s: the beats run on real time.
	waitFor := func(cond func() bool) bool {
		for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
			if cond() {
				return true
			}
		}
		return false
	}

	var ms []*fleet.Members
	var stops []context.CancelFunc
	var runs []chan error
	for _, id := range []string{"a", "b", "c"} {
		client := redis.NewClient(&redis.Options{Addr: addr})
		defer client.Close()
		m, err := fleet.New(client, fleet.WithKey("fg:fleet:{checkout}"), fleet.WithInstanceID(id),
			fleet.WithHeartbeat(10*time.Millisecond, time.Minute), // a TTL far beyond the wait below
			fleet.WithTimeout(time.Second))                        // a beat on a busy host may outlast the 10ms interval
		if err != nil {
			log.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- m.Run(ctx) }() // beats at once, then every 10ms; leaves when ctx ends
		ms, stops, runs = append(ms, m), append(stops, cancel), append(runs, done)
	}
	counting := func(n int, ms ...*fleet.Members) func() bool {
		return func() bool {
			for _, m := range ms {
				if m.Count() != n { // m.Count is what the stores that share a limit take
					return false
				}
			}
			return true
		}
	}
	fmt.Println("all count 3:", waitFor(counting(3, ms...)))

	stops[2]() // c stops: its Run leaves the member set
	fmt.Println("c's Run returned:", <-runs[2])
	fmt.Println("a and b count 2:", waitFor(counting(2, ms[0], ms[1])))
	for i := range 2 {
		stops[i]()
		<-runs[i]
	}
	// Output:
	// all count 3: true
	// c's Run returned: context canceled
	// a and b count 2: true
}
