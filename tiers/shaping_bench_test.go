package tiers_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/internal/reqctx"
)

// BenchmarkShaping: one Admit over the memstore that nothing makes wait,
// with and without max_wait on the rule, for an allowed request (a rate
// that never runs out) and a denied one (1 per hour, spent: the wait it
// would need is an hour, beyond max_wait). The max_wait rows show what the
// wait path costs a request that does not wait: the deadline and waiter
// cap checks before the take. The settle rows are a request of a rule
// that settles: Admit, and its Done called with the actual cost (one
// Settle of the store); settle_meter's rule counts a named meter, which
// the Result carries in Meters.
func BenchmarkShaping(b *testing.B) {
	const allow = "rules:\n  - {name: r, key: [tenant], rate: 1000000000/1s%s}\n"
	const deny = "rules:\n  - {name: r, key: [tenant], rate: 1/1h%s}\n"
	for _, bc := range []struct {
		name, policy, extra string
		allowed, settle     bool
		meter               bool
	}{
		{"allow/plain", allow, "", true, false, false},
		{"allow/max_wait", allow, ", max_wait: 1s", true, false, false},
		{"deny/plain", deny, "", false, false, false},
		{"deny/max_wait", deny, ", max_wait: 1s", false, false, false},
		{"allow/settle", allow, ", settle: true", true, true, false},
		{"allow/settle_meter", allow, ", settle: true, meter: output_tokens", true, true, true},
	} {
		b.Run(bc.name, func(b *testing.B) {
			l := mustLimiter(b, newMemstore(b), fmt.Sprintf(bc.policy, bc.extra))
			r := &floodgate.Request{Method: "/llm.v1.LLM/Complete", Identity: floodgate.Identity{Tenant: "acme"}}
			ctx := context.Background()
			if _, _, err := l.Admit(ctx, r); err != nil { // spend the 1 per hour
				b.Fatal(err)
			}
			res := floodgate.Result{Cost: 1, HasCost: true}
			if bc.meter {
				rctx, _ := reqctx.New[floodgate.Request](ctx, nil)
				if err := floodgate.ReportMeter(rctx, "output_tokens", 1); err != nil {
					b.Fatal(err)
				}
				_, _, m := reqctx.Costs(rctx)
				res = floodgate.Result{Meters: m}
			}
			b.ReportAllocs()
			for b.Loop() {
				d, done, err := l.Admit(ctx, r)
				if err != nil || d.Allowed != bc.allowed || d.Waited != 0 || (done != nil) != bc.settle {
					b.Fatalf("%+v %v", d, err)
				}
				if done != nil {
					done(res)
				}
			}
		})
	}
}
