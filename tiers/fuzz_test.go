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
		for _, m := range []string{"/a.B/C", "GET /v1/items/{id}", ""} {
			bs := l.Buckets(nil, &floodgate.Request{Method: m, Tier: "pro", Identity: floodgate.Identity{User: "u", Tenant: "t", APIKey: "k", IP: netip.MustParseAddr("::1")}})
			for _, b := range bs {
				if err := b.Limit.Validate(); err != nil || b.Cost < 1 || b.Cost > b.Limit.Capacity() || strings.Count(b.Key, "{") != 1 {
					t.Fatalf("bucket %+v: %v", b, err)
				}
			}
		}
	})
}
