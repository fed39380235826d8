package tiers_test

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/quota"
	"github.com/floodgate-go/floodgate/testing/clock"
	"github.com/floodgate-go/floodgate/tiers"
	"github.com/floodgate-go/floodgate/tiers/memstore"
)

func withHeaders(r floodgate.Request, kv ...string) *floodgate.Request {
	r.Headers = nil
	for i := 0; i+1 < len(kv); i += 2 {
		r.Headers = append(r.Headers, floodgate.Header{Name: kv[i], Value: kv[i+1]})
	}
	return &r
}

func ruleNames(bs []quota.Bucket) []string {
	out := make([]string, len(bs))
	for i, b := range bs {
		out[i] = b.Rule
	}
	return out
}

// A rule matches on method, header values and tier together; every
// condition must hold.
func TestMatchHeaderAndTier(t *testing.T) {
	l := mustLimiter(t, newMemstore(t), `
tiers:
  free: {rate: 10/1m}
  pro: {rate: 100/1m}
default_tier: free
rules:
  - name: mobile-search
    match:
      method: "/search.v1.Search/*"
      header: {X-Client-Type: [mobile, tablet]}
    key: [user]
    rate: 5/1m
  - name: partner
    match: {header: {x-partner: acme, x-env: prod}}
    key: [user]
    rate: 50/1m
  - name: free-only
    match: {tier: [free]}
    key: [user]
    rate: 7/1m
  - name: all
    key: [user]
    rate: 1000/1m
`)
	if got := l.RequestHeaders(); !slices.Equal(got, []string{"x-client-type", "x-env", "x-partner"}) {
		t.Errorf("RequestHeaders = %q, want the three headers, lower-case, sorted", got)
	}
	base := floodgate.Request{Method: "/search.v1.Search/Query", Tier: "pro", Identity: floodgate.Identity{User: "u"}}
	for _, tc := range []struct {
		name string
		r    *floodgate.Request
		want []string
	}{
		{"no headers", withHeaders(base), []string{"all"}},
		{"mobile", withHeaders(base, "x-client-type", "mobile"), []string{"mobile-search", "all"}},
		{"tablet", withHeaders(base, "x-client-type", "tablet"), []string{"mobile-search", "all"}},
		{"values are case-sensitive", withHeaders(base, "x-client-type", "Mobile"), []string{"all"}},
		{"other value", withHeaders(base, "x-client-type", "desktop"), []string{"all"}},
		{"other method", func() *floodgate.Request {
			r := withHeaders(base, "x-client-type", "mobile")
			r.Method = "/cart.v1.Cart/Add"
			return r
		}(), []string{"all"}},
		{"both partner headers", withHeaders(base, "x-partner", "acme", "x-env", "prod"), []string{"partner", "all"}},
		{"one partner header", withHeaders(base, "x-partner", "acme"), []string{"all"}},
		{"free tier", func() *floodgate.Request { r := withHeaders(base); r.Tier = "free"; return r }(), []string{"free-only", "all"}},
		{"unknown tier is the default", func() *floodgate.Request { r := withHeaders(base); r.Tier = "gold"; return r }(), []string{"free-only", "all"}},
		{"no tier is the default", func() *floodgate.Request { r := withHeaders(base); r.Tier = ""; return r }(), []string{"free-only", "all"}},
	} {
		if got := ruleNames(l.Buckets(nil, tc.r)); !slices.Equal(got, tc.want) {
			t.Errorf("%s: rules %q, want %q", tc.name, got, tc.want)
		}
	}
}

// A header key scope splits a rule's buckets by the header's value,
// escaped or hashed like every identity component: no value can forge
// another's key, choose another hash tag, or break the key's format.
func TestHeaderKeyScope(t *testing.T) {
	clk := clock.New(time.Time{})
	s := newMemstore(t, memstore.WithClock(clk))
	l := mustLimiter(t, s, `
rules:
  - {name: region, key: [tenant, header:X-Region], rate: 2/1m}
  - {name: by-app, key: [header:x-app], rate: 1/1m}
overrides:
  - {rule: region, key: {tenant: acme, "header:x-region": eu}, rate: 5/1m}
`)
	base := floodgate.Request{Method: "/a.B/C", Identity: floodgate.Identity{Tenant: "acme"}}
	huge := strings.Repeat("z", 1<<16)
	sum := sha256.Sum256([]byte(huge))
	for _, tc := range []struct {
		value string
		key   string
	}{
		{"eu", "fg:{tenant=acme}:region:header.x-region=eu:token_bucket"},
		{"us-east-1", "fg:{tenant=acme}:region:header.x-region=us-east-1:token_bucket"},
		{"eu:x=y}{", "fg:{tenant=acme}:region:header.x-region=eu%3Ax%3Dy%7D%7B:token_bucket"},
		{"eu%3A", "fg:{tenant=acme}:region:header.x-region=eu%253A:token_bucket"},
		{"#a", "fg:{tenant=acme}:region:header.x-region=%23a:token_bucket"},
		{"zürich", "fg:{tenant=acme}:region:header.x-region=z%C3%BCrich:token_bucket"},
		{"a\r\nb", "fg:{tenant=acme}:region:header.x-region=a%0D%0Ab:token_bucket"},
		{huge, "fg:{tenant=acme}:region:header.x-region=#" + hex.EncodeToString(sum[:16]) + ":token_bucket"},
	} {
		bs := l.Buckets(nil, withHeaders(base, "x-region", tc.value))
		if len(bs) != 1 || bs[0].Key != tc.key {
			t.Errorf("x-region %.30q: keys %q, want %q", tc.value, keys(bs), tc.key)
		}
	}
	// As the first scope, the header's escaped value is the hash tag:
	// braces in it cannot end the tag early.
	bs := l.Buckets(nil, withHeaders(floodgate.Request{Method: "/a.B/C"}, "x-app", "}{evil"))
	if len(bs) != 1 || bs[0].Key != "fg:{header.x-app=%7D%7Bevil}:by-app:token_bucket" {
		t.Errorf("x-app: %q", keys(bs))
	}

	// Each value has its own bucket; the override gives eu 5.
	for region, limit := range map[string]int64{"eu": 5, "us": 2} {
		r := withHeaders(base, "x-region", region)
		for i := range limit {
			if d := admit(t, l, r); !d.Allowed || d.Limit != limit {
				t.Fatalf("%s request %d: %+v", region, i, d)
			}
		}
		if d := admit(t, l, r); d.Allowed || d.Policy != "region" {
			t.Fatalf("%s request %d: %+v, want a deny by region", region, limit+1, d)
		}
	}
	// Without the header the rule does not apply, and says so.
	if d := admit(t, l, withHeaders(base)); !d.Allowed || d.Skipped != "region,by-app" || d.Policy != "" {
		t.Errorf("no header: %+v, want both rules skipped", d)
	}
}

func TestMatchLoadErrors(t *testing.T) {
	for _, tc := range []struct {
		name, yaml, want string
	}{
		{"credential header", "rules:\n  - name: a\n    rate: 1/1s\n    match: {header: {Authorization: [x]}}\n",
			`rules[0].match.header.Authorization: header "authorization" cannot be matched or keyed on: it carries credentials: key on api_key (interceptor.WithAPIKey), which is always hashed, at line 4`},
		{"forwarding header key", "rules:\n  - name: a\n    rate: 1/1s\n    key: [user,\n      header:X-Forwarded-For]\n",
			`rules[0].key[1]: header "x-forwarded-for" cannot be matched or keyed on: a client forges it: key on ip, which is read from forwarding headers of trusted proxies only, at line 5`},
		{"bad header name", "rules:\n  - name: a\n    rate: 1/1s\n    key: [\"header:x region\"]\n",
			`rules[0].key[0]: header name "x region" must match [A-Za-z0-9_.-]+, at line 4`},
		{"bare header scope", "rules:\n  - name: a\n    rate: 1/1s\n    key: [header]\n",
			"rules[0].key[0]: name the header: header:<name> (header:x-region), at line 4"},
		{"empty header name", "rules:\n  - name: a\n    rate: 1/1s\n    key: [\"header:\"]\n",
			"rules[0].key[0]: header name must not be empty, at line 4"},
		{"repeated header scope", "rules:\n  - name: a\n    rate: 1/1s\n    key: [header:x-a, header:X-A]\n",
			`rules[0].key[1]: scope "header:x-a" is repeated (header names are case-insensitive), at line 4`},
		{"binary metadata", "rules:\n  - name: a\n    rate: 1/1s\n    match:\n      header:\n        trace-bin: [x]\n",
			`rules[0].match.header.trace-bin: header "trace-bin" is binary gRPC metadata; only text headers can be matched or keyed on, at line 6`},
		{"empty value", "rules:\n  - name: a\n    rate: 1/1s\n    match:\n      header:\n        x-a: [ok, \"\"]\n",
			"rules[0].match.header.x-a[1]: an empty value never matches (a request without the header has no value), at line 6"},
		{"no values", "rules:\n  - name: a\n    rate: 1/1s\n    match:\n      header:\n        x-a: []\n",
			"rules[0].match.header.x-a: list at least one value, at line 6"},
		{"same header twice", "rules:\n  - name: a\n    rate: 1/1s\n    match:\n      header: {x-a: [1], X-A: [2]}\n",
			`rules[0].match.header.x-a: header "x-a" is already matched as "X-A" (names are case-insensitive), at line 5`},
		{"header not a mapping", "rules:\n  - name: a\n    rate: 1/1s\n    match:\n      header: [x-a]\n",
			"rules[0].match.header: must be a mapping of header names to values, got a list, at line 5"},
		{"unknown tier", "tiers: {free: {rate: 1/1s}}\nrules:\n  - name: a\n    rate: 1/1s\n    match:\n      tier: [free, gold]\n",
			`rules[0].match.tier[1]: "gold" is not one of the tiers, at line 6`},
		{"unknown match field", "rules:\n  - name: a\n    rate: 1/1s\n    match: {methd: /a.B/C}\n",
			"rules[0].match.methd: unknown field, at line 4"},
		{"override header scope mismatch", "rules:\n  - {name: a, key: [tenant, header:x-region], rate: 1/1s}\noverrides:\n  - {rule: a, key: {tenant: t, header:x-zone: eu}, rate: 2/1s}\n",
			`overrides[0].key: scopes [tenant, header:x-zone] do not match rule "a" key [tenant, header:x-region], at line 4`},
		{"override empty header value", "rules:\n  - {name: a, key: [header:x-region], rate: 1/1s}\noverrides:\n  - {rule: a, key: {header:x-region: \"\"}, rate: 2/1s}\n",
			"overrides[0].key.header:x-region: must not be empty, at line 4"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := tiers.Load([]byte(tc.yaml))
			var pe *tiers.PolicyError
			if !errors.As(err, &pe) {
				t.Fatalf("err = %v, want a *PolicyError", err)
			}
			if err.Error() != tc.want {
				t.Errorf("Load error:\n got: %s\nwant: %s", err, tc.want)
			}
		})
	}
	// In Go: KeyHeaders must name each header scope.
	p := &tiers.Policy{Rules: []tiers.Rule{{Name: "a", Key: []tiers.Scope{tiers.ScopeTenant, tiers.ScopeHeader}, Rate: tiers.Rate{N: 1, Period: time.Second}}}}
	if err := p.Validate(); err == nil || err.Error() != "rules[0].key: has 1 header scopes but KeyHeaders names 0 headers: name one per header scope, in key order" {
		t.Errorf("Validate = %v", err)
	}
	p.Rules[0].KeyHeaders = []string{"X-Region"}
	if err := p.Validate(); err != nil {
		t.Errorf("Validate = %v", err)
	}
}

// A transport that does not copy headers is told about the rules that
// need them, as about any scope it never fills.
func TestRequireScopesHeader(t *testing.T) {
	l := mustLimiter(t, newMemstore(t), `
rules:
  - {name: by-region, key: [tenant, header:x-region], rate: 1/1s}
  - {name: mobile, match: {header: {x-client: mobile}}, rate: 1/1s}
`)
	err := l.RequireScopes(tiers.TransportHTTP, []string{"endpoint", "ip", "tenant"}, true)
	if err == nil || !strings.Contains(err.Error(), `rule "by-region" (rules[0], line 3) is keyed on header`) || !strings.Contains(err.Error(), `rule "mobile" (rules[1], line 4) is keyed on header`) {
		t.Errorf("strict without header: %v", err)
	}
	if err := l.RequireScopes(tiers.TransportHTTP, []string{"endpoint", "ip", "tenant", "header"}, true); err != nil {
		t.Errorf("strict with header: %v", err)
	}
	// A reload naming another header is accepted by the declaration that
	// fills headers, and names the new header at once.
	if err := l.SetPolicy(mustLoad(t, "rules:\n  - {name: x, key: [header:x-new], rate: 1/1s}\n")); err != nil {
		t.Errorf("reload: %v", err)
	}
	if got := l.RequestHeaders(); !slices.Equal(got, []string{"x-new"}) {
		t.Errorf("after reload RequestHeaders = %q", got)
	}
}
