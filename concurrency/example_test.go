package concurrency_test

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/concurrency"
	"github.com/floodgate-go/floodgate/testing/clock"
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

// An in-flight limit learnt from latency: Vegas takes the latency of the
// first window as the no-load latency and grows the limit while windows
// stay as fast; when latency doubles (here on a fake clock: eight calls a
// window, each window closed by its eighth call), the queue it infers
// makes the limit fall. Critical requests bypass the limit.
func ExampleNewAdaptive() {
	clk := clock.New(time.Time{})
	a, err := concurrency.NewAdaptive(concurrency.AdaptiveConfig{
		Algorithm:  concurrency.Vegas,
		Initial:    10,
		Min:        4,
		Max:        16,
		Window:     100 * time.Millisecond,
		MinSamples: 8,
		Bypass:     floodgate.PriorityCritical,
		Clock:      clk,
	})
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()
	window := func(latency time.Duration) {
		clk.Advance(100 * time.Millisecond) // a window's length since the last one closed
		var dones []floodgate.Done
		for range 8 {
			_, done, _ := a.Admit(ctx, &floodgate.Request{Priority: floodgate.PriorityRead})
			dones = append(dones, done)
		}
		clk.Advance(latency)
		for _, done := range dones {
			done(floodgate.Result{Outcome: floodgate.OutcomeSuccess}) // the transport reports how each call ended
		}
	}
	for range 3 {
		window(20 * time.Millisecond)
	}
	fmt.Println("at 20ms:", a.Limit())
	for range 3 {
		window(40 * time.Millisecond)
	}
	fmt.Println("at 40ms:", a.Limit())
	// Output:
	// at 20ms: 16
	// at 40ms: 12
}
