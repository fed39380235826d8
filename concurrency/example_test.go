package concurrency_test

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/concurrency"
)

// At most 100 requests in flight on this instance, and at most 2 per user on
// the expensive search method.
func ExampleNew() {
	l, err := concurrency.New(
		concurrency.WithGlobal(100),
		concurrency.WithPerKey(concurrency.PerKey{
			Name: "search-per-user",
			Cap:  2,
			Key: func(r *floodgate.Request) (string, bool) {
				return r.Identity.User, r.Method == "/search.v1.Search/Query"
			},
		}),
	)
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()
	r := &floodgate.Request{Method: "/search.v1.Search/Query", Identity: floodgate.Identity{User: "alice"}}
	var dones []floodgate.Done
	for range 3 {
		d, done, _ := l.Admit(ctx, r)
		fmt.Printf("allowed=%v policy=%s limit=%d remaining=%d\n", d.Allowed, d.Policy, d.Limit, d.Remaining)
		if done != nil {
			dones = append(dones, done)
		}
	}
	for _, done := range dones {
		done(floodgate.Result{}) // the transport calls Done, by defer, when the request ends
	}
	fmt.Println("in flight:", l.InFlight())
	// Output:
	// allowed=true policy=search-per-user limit=2 remaining=1
	// allowed=true policy=search-per-user limit=2 remaining=0
	// allowed=false policy=search-per-user limit=2 remaining=0
	// in flight: 0
}

// A per-user cap across the whole fleet, kept in Redis. Slots of an
// instance that crashes expire after the lease; Run renews the leases of
// long requests.
func ExampleWithFleetPerKey() {
	client := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379"})
	l, err := concurrency.New(concurrency.WithFleetPerKey(concurrency.FleetPerKey{
		Name:    "fleet-per-user",
		Cap:     20,
		Key:     func(r *floodgate.Request) (string, bool) { return r.Identity.User, r.Identity.User != "" },
		Client:  client,
		Lease:   time.Minute,
		OnError: concurrency.FailOpen,
	}))
	if err != nil {
		log.Fatal(err)
	}
	go l.Run(context.Background(), func(err error) { log.Print(err) })
}
