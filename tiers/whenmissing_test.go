package tiers_test

import (
	"context"
	"strings"
	"testing"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/tiers"
)

// TestWhenMissing: a rule that says when_missing deny denies a request
// without its scope before anything is charged; skip skips it; either way
// the rule is no longer reported as keyed on a scope never filled, even
// strictly, while a rule that says nothing still is.
func TestWhenMissing(t *testing.T) {
	const policy = `
rules:
  - {name: per-ip, key: [ip], rate: 1/1h}
  - {name: users-only, key: [user], rate: 10/1h, when_missing: deny}
  - {name: per-tenant, key: [tenant], rate: 10/1h, when_missing: skip}
  - {name: dark, key: [api_key], rate: 10/1h, when_missing: deny, shadow: true}
`
	l := mustLimiter(t, newMemstore(t), policy)
	if err := l.RequireScopes(tiers.TransportHTTP, []string{"endpoint", "ip"}, true); err != nil {
		t.Fatalf("strict RequireScopes of rules that say when_missing: %v", err)
	}
	ctx := context.Background()
	anon := &floodgate.Request{Method: "GET /v1/items", Identity: floodgate.Identity{IP: ip("192.0.2.1")}}
	d, done, err := l.Admit(ctx, anon)
	if err != nil {
		t.Fatal(err)
	}
	if d.Allowed || d.Policy != "users-only" || d.Source != floodgate.SourcePolicy || !d.HideQuota || d.RetryAfter != 0 || done != nil {
		t.Errorf("a request without a user: %+v, want denied by users-only from the policy, quota hidden, no retry", d)
	}
	// Nothing was charged: the per-ip bucket (1 per hour) still admits
	// the same address once it names a user.
	alice := &floodgate.Request{Method: "GET /v1/items", Identity: floodgate.Identity{IP: ip("192.0.2.1"), User: "alice"}}
	d, _, err = l.Admit(ctx, alice)
	if err != nil {
		t.Fatal(err)
	}
	if !d.Allowed || d.Skipped != "per-tenant,dark" {
		t.Errorf("alice, no tenant, no API key: %+v, want allowed, per-tenant and dark (shadow: skips) skipped", d)
	}
	if d, _, _ = l.Admit(ctx, alice); d.Allowed || d.Policy != "per-ip" {
		t.Errorf("alice again: %+v, want denied by per-ip (its one unit went to the first admit)", d)
	}

	// A batch: the request without the user refuses the whole call.
	bob := &floodgate.Request{Method: "GET /v1/items", Identity: floodgate.Identity{IP: ip("192.0.2.2"), User: "bob"}}
	anon2 := &floodgate.Request{Method: "GET /v1/items", Identity: floodgate.Identity{IP: ip("192.0.2.3")}}
	ds := make([]floodgate.Decision, 2)
	whole, err := l.AdmitMany(ctx, []tiers.Item{{Request: bob, Rule: ""}, {Request: anon2}}, ds)
	if err != nil {
		t.Fatal(err)
	}
	if whole.Allowed || ds[1].Allowed || ds[1].Policy != "users-only" {
		t.Errorf("batch: %+v, item 1 %+v, want denied by users-only", whole, ds[1])
	}
	if d, _, _ := l.Admit(ctx, bob); !d.Allowed {
		t.Errorf("bob after a refused batch: %+v, want allowed (the batch charged nothing)", d)
	}

	// A rule that says nothing is still refused strictly, with its line.
	strict := mustLimiter(t, newMemstore(t), policy+"  - {name: silent, key: [tenant], rate: 10/1h}\n")
	err = strict.RequireScopes(tiers.TransportHTTP, []string{"endpoint", "ip"}, true)
	if err == nil || !strings.Contains(err.Error(), `rule "silent" (rules[4], line 7) is keyed on tenant`) || strings.Contains(err.Error(), "per-tenant") {
		t.Errorf("strict RequireScopes = %v, want silent refused with its line, per-tenant not", err)
	}
}

// TestWhenMissingErrors: a bad value, or when_missing on a rule without
// a key, is refused naming the field and its line.
func TestWhenMissingErrors(t *testing.T) {
	for _, tc := range []struct{ policy, want string }{
		{"rules:\n  - {name: a, key: [user], rate: 1/s, when_missing: allow}\n", `rules[0].when_missing: "allow" is not skip or deny, at line 2`},
		{"rules:\n  - {name: a, rate: 1/s, when_missing: deny}\n", "rules[0].when_missing: only for a rule with a key"},
	} {
		if got := mustLoadErr(t, tc.policy); !strings.Contains(got, tc.want) {
			t.Errorf("Load:\n%s\nwant %q", got, tc.want)
		}
	}
}
