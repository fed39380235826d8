package shedder_test

import (
	"context"
	"fmt"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/shedder"
)

// With fairness by tenant, a tenant whose reads fill the reads' room is
// shed, and another tenant's reads are still served (a policy file says
// it as shedder: fairness: {by: tenant}).
func ExampleConfig_fairness() {
	s, err := shedder.New(10)
	if err != nil {
		panic(err)
	}
	if err := s.Reconfigure(shedder.Config{Capacity: 10, Fairness: &floodgate.Fairness{By: "tenant"}}); err != nil {
		panic(err)
	}
	read := func(tenant string) floodgate.Decision {
		d, _, _ := s.Admit(context.Background(), &floodgate.Request{Priority: floodgate.PriorityRead, Identity: floodgate.Identity{Tenant: tenant}})
		return d
	}
	for range 8 { // reads are shed from 8 in flight (80 % of 10)
		read("noisy")
	}
	d := read("noisy")
	fmt.Println("noisy:", d.Allowed, d.Policy)
	d = read("quiet")
	fmt.Println("quiet:", d.Allowed)
	// Output:
	// noisy: false shedder.fairness
	// quiet: true
}
