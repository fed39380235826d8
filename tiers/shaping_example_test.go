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

// A rule that settles charges its estimate when a request is admitted and
// the actual cost when it ends: the transport calls the Done with what
// the handler reported through floodgate.ReportCost.
func Example_settle() {
	policy, err := tiers.Load([]byte(`
rules:
  - {name: tenant-tokens, key: [tenant], rate: 1000/1h, settle: true}
`))
	if err != nil {
		fmt.Println(err)
		return
	}
	store, _ := memstore.New(memstore.WithClock(clock.New(time.Time{})))
	limits, err := tiers.NewLimiter(store, policy)
	if err != nil {
		fmt.Println(err)
		return
	}
	r := &floodgate.Request{Method: "/llm.v1.LLM/Complete", Cost: 300, Identity: floodgate.Identity{Tenant: "acme"}} // estimate: max_tokens
	d, done, _ := limits.Admit(context.Background(), r)
	fmt.Println("admitted:", d.Allowed, "remaining:", d.Remaining)
	done(floodgate.Result{Cost: 120, HasCost: true}) // the completion generated 120 tokens
	r.Cost = 800
	d, done, _ = limits.Admit(context.Background(), r)
	fmt.Println("admitted:", d.Allowed, "remaining:", d.Remaining)
	done(floodgate.Ignored) // a later stage denied it: the estimate comes back
	r.Cost = 1000
	d, _, _ = limits.Admit(context.Background(), r)
	fmt.Println("admitted:", d.Allowed, "retry after:", d.RetryAfter)
	// Output:
	// admitted: true remaining: 700
	// admitted: true remaining: 80
	// admitted: false retry after: 7m12s
}

// A rule with max_wait holds a request whose units arrive in time instead
// of denying it, and the Decision says how long it waited. (On the fake
// clock of package testing/clock, which the Limiter waits on: a goroutine
// moves it once the request waits.)
func Example_maxWait() {
	policy, err := tiers.Load([]byte(`
rules:
  - {name: shaped, key: [tenant], rate: 10/1s, burst: 1, max_wait: 250ms}
`))
	if err != nil {
		fmt.Println(err)
		return
	}
	clk := clock.New(time.Time{})
	store, _ := memstore.New(memstore.WithClock(clk))
	limits, err := tiers.NewLimiter(store, policy, tiers.WithClock(clk))
	if err != nil {
		fmt.Println(err)
		return
	}
	go func() { // time passes once someone waits
		for clk.Timers() == 0 {
			time.Sleep(time.Millisecond)
		}
		clk.Advance(100 * time.Millisecond)
	}()
	r := &floodgate.Request{Method: "/svc/Call", Identity: floodgate.Identity{Tenant: "acme"}}
	for range 2 {
		d, _, _ := limits.Admit(context.Background(), r)
		fmt.Println("admitted:", d.Allowed, "waited:", d.Waited)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	d, _, _ := limits.Admit(ctx, r) // its unit is 100 ms away, its deadline 50 ms
	fmt.Println("admitted:", d.Allowed, "retry after:", d.RetryAfter)
	// Output:
	// admitted: true waited: 0s
	// admitted: true waited: 100ms
	// admitted: false retry after: 100ms
}
