package tiers_test

import (
	"context"
	"strconv"
	"testing"

	"github.com/floodgate-go/floodgate"
)

// BenchmarkAdmitRichPolicy is BenchmarkAdmit4Levels's request with the
// richer policy features: a tier with two windows, a rule matching a
// header, a rule keyed on a header, one rolled out to half its keys. Each
// window and level is its own bucket of the one take.
func BenchmarkAdmitRichPolicy(b *testing.B) {
	l := mustLimiter(b, newMemstore(b), `
tiers:
  free: {rate: [1000000000/1s, 1000000000/1h]}
default_tier: free
rules:
  - {name: user-region, key: [user, header:x-region], rate: 1000000000/1s, enforce_percent: 50}
  - {name: mobile, match: {header: {x-client-type: [ios]}}, key: [user], rate: 1000000000/1s}
  - {name: tenant, key: [tenant], rate: tier}
  - {name: global, rate: [1000000000/1s, 1000000000/1h]}
`)
	rs := benchRequests(1024)
	for i, r := range rs {
		r.Headers = []floodgate.Header{{Name: "x-client-type", Value: "ios"}, {Name: "x-region", Value: "eu-" + strconv.Itoa(i%3)}}
	}
	ctx := context.Background()
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		d, _, err := l.Admit(ctx, rs[i&1023])
		if err != nil || !d.Allowed {
			b.Fatalf("%+v %v", d, err)
		}
		i++
	}
}
