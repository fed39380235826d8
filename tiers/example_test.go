package tiers_test

import (
	"context"
	"fmt"
	"net/netip"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/testing/clock"
	"github.com/floodgate-go/floodgate/tiers"
	"github.com/floodgate-go/floodgate/tiers/memstore"
)

func ExampleLoad() {
	p, err := tiers.Load([]byte(`
tiers:
  free: {rate: 100/1h, burst: 10}
  pro:  {rate: 5000/1h, burst: 100}
default_tier: free
rules:
  - name: search
    match: {method: "/search.v1.Search/*"}
    key: [user]
    rate: 10/1s
    burst: 20
  - name: tenant-plan
    key: [tenant]
    rate: tier
`))
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, r := range p.Rules {
		fmt.Println(r.Name, r.Key, r.Rate)
	}

	// Every error is reported, with its field and line.
	_, err = tiers.Load([]byte(`
rules:
  - name: login
    rate: 5/minute
    key: [ip, usr]
`))
	fmt.Println(err)
	// Output:
	// search [user] 10/1s
	// tenant-plan [tenant] tier
	// rules[0].rate: "5/minute" is not N/duration (write 5/1m), at line 4
	// rules[0].key[1]: unknown scope "usr" (want endpoint, user, api_key, ip, tenant or header:<name>), at line 5
}

func ExampleLimiter() {
	clk := clock.New(time.Time{}) // fake time: the example is exact
	store, err := memstore.New(memstore.WithClock(clk))
	if err != nil {
		fmt.Println(err)
		return
	}
	policy, err := tiers.Load([]byte(`
rules:
  - {name: per-user, key: [user], rate: 2/1m}
  - {name: per-ip, key: [ip], rate: 100/1m}
`))
	if err != nil {
		fmt.Println(err)
		return
	}
	limits, err := tiers.NewLimiter(store, policy)
	if err != nil {
		fmt.Println(err)
		return
	}
	req := &floodgate.Request{
		Method:   "/shop.v1.Cart/Add",
		Identity: floodgate.Identity{User: "alice", IP: netip.MustParseAddr("192.0.2.1")},
	}
	for range 3 {
		d, _, err := limits.Admit(context.Background(), req)
		if err != nil {
			fmt.Println(err)
			return
		}
		fmt.Printf("allowed=%v policy=%s remaining=%d retry_after=%s\n", d.Allowed, d.Policy, d.Remaining, d.RetryAfter)
	}
	// Output:
	// allowed=true policy=per-user remaining=1 retry_after=0s
	// allowed=true policy=per-user remaining=0 retry_after=0s
	// allowed=false policy=per-user remaining=0 retry_after=30s
}
