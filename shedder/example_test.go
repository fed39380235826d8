package shedder_test

import (
	"context"
	"fmt"
	"log"

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

// With retries shed first, a Shedder sized for 20 requests in flight
// sheds a retried read (grpc-previous-rpc-attempts above 0, which the
// transport copies into the Request) from 15 in flight, one margin of 5%
// of capacity below the reads' threshold of 16, while a first attempt
// still passes.
func ExampleWithRetries() {
	s, err := shedder.New(20, shedder.WithRetries(shedder.Retries{}))
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("the transport copies:", s.RequestHeaders())
	ctx := context.Background()
	for range 15 {
		s.Admit(ctx, &floodgate.Request{Priority: floodgate.PriorityCritical}) // held in flight
	}
	first := &floodgate.Request{Priority: floodgate.PriorityRead}
	retry := &floodgate.Request{Priority: floodgate.PriorityRead,
		Headers: []floodgate.Header{{Name: "grpc-previous-rpc-attempts", Value: "1"}}}
	for _, r := range []*floodgate.Request{retry, first} {
		d, _, _ := s.Admit(ctx, r)
		fmt.Printf("retry=%-5v allowed=%v policy=%q\n", r.Headers != nil, d.Allowed, d.Policy)
	}
	// Output:
	// the transport copies: [grpc-previous-rpc-attempts]
	// retry=true  allowed=false policy="shedder.retries"
	// retry=false allowed=true policy=""
}
