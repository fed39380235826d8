package shedder_test

import (
	"context"
	"fmt"
	"log"
	"os"
	"os/signal"

	"github.com/redis/go-redis/v9"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/shedder"
)

// A Shedder sized for 10 requests in flight sheds test traffic from 7,
// reads from 8, writes from 9, and never sheds critical traffic.
func ExampleNew() {
	s, err := shedder.New(10)
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()
	var running []floodgate.Done
	for range 7 { // 7 critical requests in flight
		_, done, _ := s.Admit(ctx, &floodgate.Request{Priority: floodgate.PriorityCritical})
		running = append(running, done)
	}
	for _, p := range []floodgate.Priority{floodgate.PriorityTest, floodgate.PriorityRead, floodgate.PriorityCritical} {
		d, done, _ := s.Admit(ctx, &floodgate.Request{Priority: p})
		fmt.Printf("%-8s allowed=%v policy=%q retry-after=%s\n", p, d.Allowed, d.Policy, d.RetryAfter)
		if done != nil {
			done(floodgate.Result{}) // the transport calls Done when the request ends
		}
	}
	for _, done := range running {
		done(floodgate.Result{})
	}
	fmt.Println("in flight:", s.InFlight())
	// Output:
	// test     allowed=false policy="shedder" retry-after=1s
	// read     allowed=true policy="" retry-after=0s
	// critical allowed=true policy="" retry-after=0s
	// in flight: 0
}

// A Fleet shares in-flight counts through Redis so that the whole fleet
// keeps 20% of its capacity for critical traffic. Run keeps the counts
// fresh and removes this instance's entry when it stops.
func ExampleNewFleet() {
	client := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379"})
	fleet, err := shedder.NewFleet(client, 2000) // the whole fleet serves 2000 in flight
	if err != nil {
		log.Fatal(err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	go fleet.Run(ctx, func(err error) { log.Print(err) })

	// Chain it before the local shedder and the other stages.
	local, err := shedder.New(100)
	if err != nil {
		log.Fatal(err)
	}
	_ = floodgate.Chain{fleet, local}
}
