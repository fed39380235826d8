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

// A batch endpoint takes what the limits allow: every rule that charges
// the request's cost gives the same grant, the most each of them can.
func ExampleLimiter_AdmitAtMost() {
	policy, err := tiers.Load([]byte(`
rules:
  - {name: user-events, key: [user], rate: 100/1s}
  - {name: tenant-events, key: [tenant], rate: 120/1s}
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
	for _, user := range []string{"ann", "bob", "bob"} {
		r := &floodgate.Request{Method: "/events.v1.Ingest/Batch", Cost: 150, Identity: floodgate.Identity{Tenant: "acme", User: user}}
		granted, d, _ := limits.AdmitAtMost(context.Background(), r)
		fmt.Printf("%s: granted %d of 150 (%s, retry after %v)\n", user, granted, d.Policy, d.RetryAfter)
	}
	// Output:
	// ann: granted 100 of 150 (user-events, retry after 0s)
	// bob: granted 20 of 150 (tenant-events, retry after 0s)
	// bob: granted 0 of 150 (tenant-events, retry after 8.334ms)
}

// A plan quota that resets at midnight on the first of the month in the
// tenant's time zone: the denial's RetryAfter is the time to that
// midnight, the window the month's true length.
func Example_calendar() {
	policy, err := tiers.Load([]byte(`
rules:
  - {name: plan, key: [tenant], rate: 3/month, time_zone: America/New_York}
`))
	if err != nil {
		fmt.Println(err)
		return
	}
	ny, err := time.LoadLocation("America/New_York")
	if err != nil {
		fmt.Println(err)
		return
	}
	clk := clock.New(time.Date(2026, 2, 28, 18, 0, 0, 0, ny)) // 6 pm on February's last day
	store, _ := memstore.New(memstore.WithClock(clk))
	limits, err := tiers.NewLimiter(store, policy, tiers.WithClock(clk))
	if err != nil {
		fmt.Println(err)
		return
	}
	r := &floodgate.Request{Method: "/api.v1.Reports/Create", Identity: floodgate.Identity{Tenant: "acme"}}
	for range 4 {
		d, _, _ := limits.Admit(context.Background(), r)
		fmt.Printf("allowed %v, remaining %d, retry after %v, window %v\n", d.Allowed, d.Remaining, d.RetryAfter, d.Window)
	}
	clk.Advance(6 * time.Hour) // midnight, March 1st, in New York
	d, _, _ := limits.Admit(context.Background(), r)
	fmt.Printf("March: allowed %v, remaining %d, window %v\n", d.Allowed, d.Remaining, d.Window)
	// Output:
	// allowed true, remaining 2, retry after 0s, window 672h0m0s
	// allowed true, remaining 1, retry after 0s, window 672h0m0s
	// allowed true, remaining 0, retry after 0s, window 672h0m0s
	// allowed false, remaining 0, retry after 6h0m0s, window 672h0m0s
	// March: allowed true, remaining 2, window 743h0m0s
}
