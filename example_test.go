package floodgate_test

import (
	"context"
	"fmt"

	"github.com/floodgate-go/floodgate"
)

// A Chain runs stages in order and stops at the first deny, releasing the
// stages already passed.
func ExampleChain() {
	inFlight := 0
	slots := floodgate.AdmitFunc(func(context.Context, *floodgate.Request) (floodgate.Decision, floodgate.Done, error) {
		inFlight++
		return floodgate.Decision{Allowed: true, Stage: floodgate.StageConcurrency},
			func(floodgate.Result) { inFlight-- }, nil
	})
	quota := floodgate.AdmitFunc(func(_ context.Context, r *floodgate.Request) (floodgate.Decision, floodgate.Done, error) {
		return floodgate.Decision{Allowed: r.Identity.User != "mallory", Stage: floodgate.StageTiers, Policy: "per-user"}, nil, nil
	})
	chain := floodgate.Chain{slots, quota}

	for _, user := range []string{"alice", "mallory"} {
		d, done, _ := chain.Admit(context.Background(), &floodgate.Request{
			Method:   "/shop.v1.Cart/Checkout",
			Identity: floodgate.Identity{User: user},
		})
		fmt.Printf("%s: allowed=%v policy=%s in-flight=%d\n", user, d.Allowed, d.Policy, inFlight)
		if done != nil {
			done(floodgate.Result{})
		}
	}
	// Output:
	// alice: allowed=true policy=per-user in-flight=1
	// mallory: allowed=false policy=per-user in-flight=0
}
