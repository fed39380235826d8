package localfirst_test

import (
	"context"
	"fmt"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/tiers"
	"github.com/floodgate-go/floodgate/tiers/localfirst"
	"github.com/floodgate-go/floodgate/tiers/memstore"
)

// A tenant rule decided locally (async) next to an exact login rule: the
// tenant level spends its share of the budget without a round trip, the
// login level asks the store every time, and both stay all or nothing.
// In production the ledger is a *redisstore.Store, the exact store the
// same Redis store behind fallback.New, and WithInstances counts the
// fleet (package fleet).
func ExampleNew() {
	ledger, err := memstore.New()
	if err != nil {
		fmt.Println(err)
		return
	}
	lf, err := localfirst.New(ledger, ledger)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer lf.Close(context.Background())

	policy, err := tiers.Load([]byte(`
rules:
  - {name: tenant, key: [tenant], rate: 1000/1s, consistency: async}
  - {name: login, match: {method: /auth.v1.Auth/Login}, key: [user], rate: 5/1m}
`))
	if err != nil {
		fmt.Println(err)
		return
	}
	limits, err := tiers.NewLimiter(lf, policy)
	if err != nil {
		fmt.Println(err)
		return
	}
	for i := range 3 {
		d, _, _ := limits.Admit(context.Background(), &floodgate.Request{
			Method: "/shop.v1.Shop/Search", Identity: floodgate.Identity{Tenant: "acme"}})
		fmt.Println(i, d.Allowed, d.Source)
	}
	// Output:
	// 0 true async
	// 1 true async
	// 2 true async
}
