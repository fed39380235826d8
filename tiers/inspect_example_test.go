package tiers_test

import (
	"context"
	"fmt"
	"log"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/tiers"
	"github.com/floodgate-go/floodgate/tiers/memstore"
)

// A support engineer's view of one customer: every bucket that applies,
// read without charging, then reset; docs/operators.md ("Inspect and
// reset a caller's buckets") shows the middle of it.
func ExampleLimiter_Inspect() {
	store, err := memstore.New()
	if err != nil {
		log.Fatal(err)
	}
	policy, err := tiers.Load([]byte(`
rules:
  - {name: per-user, key: [user], rate: 10/1h, burst: 10}
  - {name: per-tenant, key: [tenant], rate: 1000/24h, algorithm: fixed_window}
`))
	if err != nil {
		log.Fatal(err)
	}
	limits, err := tiers.NewLimiter(store, policy)
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()
	caller := &floodgate.Request{Identity: floodgate.Identity{User: "alice", Tenant: "acme"}}
	for range 10 {
		limits.Admit(ctx, caller)
	}
	// readme-inspect:start
	states, err := limits.Inspect(ctx, caller) // reads, charges nothing
	if err != nil {
		log.Fatal(err) // wraps tiers.ErrNoRule when no rule applies to the caller
	}
	for _, s := range states {
		fmt.Printf("%s %s: %d/%d left\n", s.Rule, s.Key, s.Remaining, s.Limit.Capacity())
	}
	reset, err := limits.Reset(ctx, caller, "per-user") // no rule names: every rule that applies
	// readme-inspect:end
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("reset:", reset[0].Rule, reset[0].Remaining)
	// Output:
	// per-user fg:{user=alice}:per-user:token_bucket: 0/10 left
	// per-tenant fg:{tenant=acme}:per-tenant:fixed_window: 990/1000 left
	// reset: per-user 10
}
