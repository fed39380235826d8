package concurrency_test

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/concurrency"
)

// A request that finds the cap full waits up to 50ms for a slot, newest
// first (LIFO), critical calls ahead of the rest, at most 200 waiting;
// docs/overload.md's "Waiting for a concurrency slot" shows this snippet.
func ExampleWithWait() {
	// readme-wait:start
	lim, err := concurrency.New(
		concurrency.WithGlobal(64),
		concurrency.WithWait(concurrency.Wait{
			Max:   50 * time.Millisecond, // the longest a request waits; then denied as before
			Queue: 200,                   // the most waiting; a full queue denies at once
			Order: concurrency.LIFO,      // newest first: low latency under overload (FIFO: oldest first)
		}),
	)
	// readme-wait:end
	if err != nil {
		log.Fatal(err)
	}
	// Below, the slot is freed by this goroutine once the request waits,
	// which a busy machine may delay past 50ms: here a request may wait a
	// minute (SetWait changes the wait at run time).
	if err := lim.SetWait(concurrency.Wait{Max: time.Minute, Queue: 200, Order: concurrency.LIFO}); err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()
	var held []floodgate.Done
	for range 64 {
		_, done, _ := lim.Admit(ctx, &floodgate.Request{})
		held = append(held, done)
	}
	admitted := make(chan floodgate.Decision)
	go func() {
		d, done, _ := lim.Admit(ctx, &floodgate.Request{Priority: floodgate.PriorityCritical})
		admitted <- d
		done(floodgate.Result{})
	}()
	for lim.Waiting() == 0 {
		time.Sleep(time.Millisecond)
	}
	fmt.Println("waiting:", lim.Waiting())
	held[0](floodgate.Result{}) // a request ends: its slot goes to the waiting one
	d := <-admitted
	fmt.Println("admitted after waiting:", d.Allowed)
	for _, done := range held[1:] {
		done(floodgate.Result{})
	}
	// Output:
	// waiting: 1
	// admitted after waiting: true
}
