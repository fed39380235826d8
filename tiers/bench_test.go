package tiers_test

import (
	"context"
	"fmt"
	"net/netip"
	"strconv"
	"strings"
	"testing"

	"github.com/floodgate-go/floodgate"
)

// Four levels: user+ip, user, tenant (by tier), and one global bucket.
const benchPolicy = `
tiers:
  free: {rate: 1000000000/1s}
default_tier: free
rules:
  - {name: user-ip, key: [user, ip], rate: 1000000000/1s}
  - {name: user, key: [user], rate: 1000000000/1s}
  - {name: tenant, key: [tenant], rate: tier}
  - {name: global, rate: 1000000000/1s}
`

func benchRequests(n int) []*floodgate.Request {
	rs := make([]*floodgate.Request, n)
	for i := range rs {
		rs[i] = &floodgate.Request{
			Method:   "/search.v1.Search/Query",
			Tier:     "free",
			Identity: floodgate.Identity{User: "user-" + strconv.Itoa(i), Tenant: "tenant-" + strconv.Itoa(i%10), IP: netip.AddrFrom4([4]byte{10, 0, byte(i >> 8), byte(i)})},
		}
	}
	return rs
}

// BenchmarkAdmit4Levels is one Admit over memstore: resolve four buckets,
// build their keys, one Take, pick the binding bucket.
func BenchmarkAdmit4Levels(b *testing.B) {
	l := mustLimiter(b, newMemstore(b), benchPolicy)
	rs := benchRequests(1024)
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

func BenchmarkAdmit4LevelsParallel(b *testing.B) {
	l := mustLimiter(b, newMemstore(b), benchPolicy)
	rs := benchRequests(1024)
	ctx := context.Background()
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		i := 0
		for pb.Next() {
			d, _, err := l.Admit(ctx, rs[i&1023])
			if err != nil || !d.Allowed {
				b.Errorf("%+v %v", d, err)
				return
			}
			i++
		}
	})
}

// BenchmarkAdmitGlobalOnly: a single rule without key, whose key is
// prebuilt: no allocation at all.
func BenchmarkAdmitGlobalOnly(b *testing.B) {
	l := mustLimiter(b, newMemstore(b), "rules:\n  - {name: global, rate: 1000000000/1s}\n")
	r := benchRequests(1)[0]
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if d, _, err := l.Admit(ctx, r); err != nil || !d.Allowed {
			b.Fatalf("%+v %v", d, err)
		}
	}
}

// apiKeyPolicy is the interceptor benchmark's policy: four keyed levels,
// one of them the always-hashed API key.
const apiKeyPolicy = `
rules:
  - {name: endpoint, key: [endpoint], rate: 1000000000/1s}
  - {name: tenant, key: [tenant], rate: 1000000000/1s}
  - {name: user, key: [user], rate: 1000000000/1s}
  - {name: api-key, key: [api_key], rate: 1000000000/1s}
`

func benchAPIKey(b *testing.B, distinct int) {
	l := mustLimiter(b, newMemstore(b), apiKeyPolicy)
	rs := make([]*floodgate.Request, distinct)
	for i := range rs {
		rs[i] = &floodgate.Request{
			Method:   "/floodgate.test.v1.Echo/Plain",
			Identity: floodgate.Identity{User: "alice", Tenant: "acme", APIKey: "k-" + strconv.Itoa(i)},
		}
	}
	ctx := context.Background()
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		d, _, err := l.Admit(ctx, rs[i%distinct])
		if err != nil || !d.Allowed {
			b.Fatalf("%+v %v", d, err)
		}
		i++
	}
}

// BenchmarkAdmitAPIKey is the interceptor benchmark's tiers stage: four
// keyed levels (endpoint, tenant, user, API key), one caller.
func BenchmarkAdmitAPIKey(b *testing.B) { benchAPIKey(b, 1) }

// BenchmarkAdmitAPIKeyMany cycles through 100000 API keys, more than any
// cache of their hashes holds: the cost of a miss.
func BenchmarkAdmitAPIKeyMany(b *testing.B) { benchAPIKey(b, 100000) }

// BenchmarkAdmitPolicySize: one Admit over memstore as the policy grows,
// N rules each on its own method (a rule per route) plus one global
// rule, so two apply to the request whatever N is: what a policy's size
// costs a request that none of its other rules concern.
func BenchmarkAdmitPolicySize(b *testing.B) {
	for _, n := range []int{10, 100, 1000, 5000} {
		b.Run("rules="+strconv.Itoa(n), func(b *testing.B) {
			var y strings.Builder
			y.WriteString("rules:\n")
			for i := range n {
				fmt.Fprintf(&y, "  - {name: r%d, match: {method: /svc.v1.S/M%d}, key: [user], rate: 1000000000/1s}\n", i, i)
			}
			y.WriteString("  - {name: global, rate: 1000000000/1s}\n")
			l := mustLimiter(b, newMemstore(b), y.String())
			r := &floodgate.Request{Method: "/svc.v1.S/M" + strconv.Itoa(n/2), Identity: floodgate.Identity{User: "u1"}}
			ctx := context.Background()
			b.ReportAllocs()
			for b.Loop() {
				d, _, err := l.Admit(ctx, r)
				if err != nil || !d.Allowed {
					b.Fatalf("%+v %v", d, err)
				}
			}
			if bs := l.Buckets(nil, r); len(bs) != 2 {
				b.Fatalf("%d buckets apply, want 2 (the method's rule and the global one)", len(bs))
			}
		})
	}
}
