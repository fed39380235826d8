package fleet_test

import (
	"context"
	"fmt"
	"log"
	"os"
	"os/signal"

	"github.com/redis/go-redis/v9"

	"github.com/floodgate-go/floodgate/fleet"
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
// the service stops. (Not run: it needs a Redis.)
func ExampleMembers_Run() {
	client := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379"})
	m, err := fleet.New(client, fleet.WithKey("fg:fleet:{checkout}"))
	if err != nil {
		log.Fatal(err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	go func() { _ = m.Run(ctx) }() // beats every second; leaves when ctx ends

	_ = m.Count // hand this to the stores that share a limit
}
