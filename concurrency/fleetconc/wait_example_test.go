package fleetconc_test

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/concurrency"
	"github.com/floodgate-go/floodgate/concurrency/fleetconc"
	"github.com/floodgate-go/floodgate/testing/redistest"
)

// One fleet slot per user; a second request for alice waits for it (up
// to 2s, newest first) instead of being denied, and gets it the moment
// the first one's Done frees it on this instance.
func ExampleWithWait() {
	addr, stop, err := redistest.StartProcess() // a real redis-server on a free loopback port
	if err != nil {
		log.Fatal(err)
	}
	defer stop()
	l, err := fleetconc.New(
		fleetconc.WithPerKey(fleetconc.PerKey{
			Name:   "fleet-per-user",
			Cap:    1,
			Key:    func(r *floodgate.Request) (string, bool) { return r.Identity.User, true },
			Client: redis.NewClient(&redis.Options{Addr: addr}),
		}),
		fleetconc.WithWait(concurrency.Wait{Max: 2 * time.Second, Order: concurrency.LIFO}),
	)
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()
	alice := &floodgate.Request{Identity: floodgate.Identity{User: "alice"}}
	_, first, _ := l.Admit(ctx, alice)
	second := make(chan floodgate.Decision)
	go func() {
		d, done, _ := l.Admit(ctx, alice)
		second <- d
		done(floodgate.Result{})
	}()
	for deadline := time.Now().Add(10 * time.Second); l.Waiting() == 0 && time.Now().Before(deadline); {
		time.Sleep(time.Millisecond)
	}
	fmt.Println("waiting:", l.Waiting())
	first(floodgate.Result{}) // the first request ends
	fmt.Println("second admitted:", (<-second).Allowed)
	// Output:
	// waiting: 1
	// second admitted: true
}
