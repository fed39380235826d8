package tiers_test

import (
	"errors"
	"net/netip"
	"os"
	"strings"
	"testing"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/tiers"
)

// FuzzLoad: the loader never panics; it either returns a policy that
// validates and drives a Limiter, or a *PolicyError whose every entry has
// a message.
func FuzzLoad(f *testing.F) {
	if data, err := os.ReadFile("testdata/policy.yaml"); err == nil {
		f.Add(data)
	}
	for _, s := range []string{
		"", "rules: []\n", "rules: [\n", "- a\n", "rules: []\n---\nrules: []\n",
		"rules:\n  - name: a\n    rate: 5/minute\n  - name: a\n    rate: 0/1s\n    burst: 0\n    bogus: 1\n",
		"rules:\n  - &x {name: a, rate: 10/1s}\n  - *x\n",
		"tiers: {free: {rate: 1/1s}}\ndefault_tier: free\nrules:\n  - {name: a, key: [tenant, ip], rate: tier}\noverrides:\n  - {rule: a, key: {tenant: x, ip: '::1'}, rate: 2/1s}\n",
		"rules:\n  - {name: a, match: {method: 'GET /v1/items/{id}'}, key: [endpoint], rate: 10/500ms, algorithm: gcra, cost: 3}\nmethods:\n  'GET /v1/items/{id}': {cost: 2, priority: read}\n",
		"rules:\n  - {name: a, rate: 1/1s, shadow: true, cache_denials: true, hide_quota: true, on_store_error: open}\n",
		"rules:\n  - {name: a, rate: 1/1s, <<: {cost: 1}}\n",
		"rules: !!binary aGVsbG8=\n", "rules:\n  - {name: a, rate: 1/1s, burst: 0x10}\n", "rules:\n  - {name: a, rate: 1/1s, burst: 99999999999999999999}\n",
		"{? [a]: b}\n", "rules: ~\n", "tiers: {'a b': {rate: 1/1s}}\nrules: []\n",
		// Windows, header matches and scopes, shadow and roll-out.
		"tiers: {free: {rate: [1/1s, 10/1h], burst: [1, 5]}}\ndefault_tier: free\nrules:\n  - {name: a, key: [tenant], rate: tier}\n  - {name: b, rate: [1/1m, 2/1h, 3/24h], algorithm: fixed_window}\noverrides:\n  - {rule: a, key: {tenant: x}, rate: [5/1s, 50/1h]}\n",
		"rules:\n  - {name: a, rate: [1/1m, 2/60s]}\n  - {name: b, rate: [], burst: [1]}\n  - {name: c, rate: [tier]}\n",
		"rules:\n  - name: a\n    match: {method: /a.B/C, header: {X-Client: [mobile, tablet], x-b: one}, tier: [free]}\n    key: [tenant, header:x-region, header:X-Zone]\n    rate: 1/1s\ntiers: {free: {rate: 1/1s}}\noverrides:\n  - {rule: a, key: {tenant: t, header:x-region: eu, header:x-zone: a}, rate: 2/1s}\n",
		"rules:\n  - {name: a, key: [header:authorization, header], rate: 1/1s, match: {header: {x-a: []}}}\n",
		"shadow: true\nrules:\n  - {name: a, rate: 1/1s, enforce_percent: 10}\n  - {name: b, key: [ip], rate: 1/1s, enforce_percent: 0}\n  - {name: c, rate: 1/1s, enforce_percent: 50, shadow: true}\n",
	} {
		f.Add([]byte(s))
	}
	store := newMemstore(f)
	f.Fuzz(func(t *testing.T, data []byte) {
		p, err := tiers.Load(data)
		if err != nil {
			if p != nil {
				t.Fatal("policy returned with an error")
			}
			var pe *tiers.PolicyError
			if !errors.As(err, &pe) || len(pe.Errs) == 0 {
				t.Fatalf("error %v is not a non-empty *PolicyError", err)
			}
			for _, fe := range pe.Errs {
				if fe.Msg == "" || fe.Line < 0 {
					t.Fatalf("bad FieldError %+v", fe)
				}
			}
			return
		}
		if err := p.Validate(); err != nil {
			t.Fatalf("loaded policy does not validate: %v", err)
		}
		l, err := tiers.NewLimiter(store, p)
		if err != nil {
			t.Fatalf("NewLimiter rejected a loaded policy: %v", err)
		}
		// Every header the policy names, with a value: header rules apply.
		var hs []floodgate.Header
		for _, n := range l.RequestHeaders() {
			if n == "" || strings.ToLower(n) != n {
				t.Fatalf("RequestHeaders has %q, want lower-case names", n)
			}
			hs = append(hs, floodgate.Header{Name: n, Value: "v}{:"})
		}
		for _, m := range []string{"/a.B/C", "GET /v1/items/{id}", ""} {
			bs := l.Buckets(nil, &floodgate.Request{Method: m, Tier: "pro", Headers: hs, Identity: floodgate.Identity{User: "u", Tenant: "t", APIKey: "k", IP: netip.MustParseAddr("::1")}})
			for _, b := range bs {
				if err := b.Limit.Validate(); err != nil || b.Cost < 1 || b.Cost > b.Limit.Capacity() || strings.Count(b.Key, "{") != 1 {
					t.Fatalf("bucket %+v: %v", b, err)
				}
			}
		}
	})
}
