package tiers_test

import (
	"context"
	"fmt"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/testing/clock"
	"github.com/floodgate-go/floodgate/tiers"
	"github.com/floodgate-go/floodgate/tiers/memstore"
)

// An LLM gateway picks, among the models a request may go to, one that
// still has quota: one round trip reads every model's buckets, charging
// nothing; then the chosen one is admitted. A model over its soft limit
// is still available, marked, for billing the overage.
func ExampleLimiter_Available() {
	policy, err := tiers.Load([]byte(`
rules:
  - {name: model, key: [tenant, header:x-model], rate: 2/1m}
  - {name: included, key: [tenant, header:x-model], rate: 1/1m, soft: true, match: {header: {x-model: [small]}}}
`))
	if err != nil {
		fmt.Println(err)
		return
	}
	clk := clock.New(time.Unix(1_800_000_000, 0))
	store, _ := memstore.New(memstore.WithClock(clk))
	limits, err := tiers.NewLimiter(store, policy, tiers.WithClock(clk))
	if err != nil {
		fmt.Println(err)
		return
	}
	ctx := context.Background()
	call := func(model string) *floodgate.Request {
		return &floodgate.Request{Method: "/llm.v1.LLM/Complete", Identity: floodgate.Identity{Tenant: "acme"},
			Headers: []floodgate.Header{{Name: "x-model", Value: model}}}
	}
	models := []string{"large", "small"}
	for range 2 {
		limits.Admit(ctx, call("large")) // the large model's 2 a minute are spent
	}
	limits.Admit(ctx, call("small")) // and the small model's included one
	alts := make([]tiers.Item, len(models))
	for i, m := range models {
		alts[i] = tiers.Item{Request: call(m)}
	}
	out := make([]floodgate.Decision, len(alts))
	n, err := limits.Available(ctx, alts, out)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Printf("%d of %d available\n", n, len(models))
	for i, m := range models {
		fmt.Printf("%s: allowed %v, remaining %d, over soft limits %q\n", m, out[i].Allowed, out[i].Remaining, out[i].SoftExceeded)
	}
	// Output:
	// 1 of 2 available
	// large: allowed false, remaining 0, over soft limits ""
	// small: allowed true, remaining 1, over soft limits "included"
}
