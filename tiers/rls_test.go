package tiers_test

import (
	"context"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/quota"
	"github.com/floodgate-go/floodgate/testing/clock"
	"github.com/floodgate-go/floodgate/tiers"
	"github.com/floodgate-go/floodgate/tiers/memstore"
)

const rlsPolicy = `
tiers:
  free: {rate: 10/1m}
  pro:  {rate: 100/1m}
default_tier: free
rules:
  - name: login-ip
    match: {method: /auth.v1.Auth/Login}
    key: [ip]
    rate: 3/1m
    algorithm: fixed_window
  - {name: per-ip, key: [ip], rate: 5/1m, algorithm: fixed_window, ipv6_prefix: 48}
  - {name: per-tenant, key: [tenant], rate: tier}
  - {name: per-user-path, key: [user, header:x-path], rate: 4/1m, algorithm: fixed_window}
rls:
  - domain: edge
    descriptors:
      - entries: [{key: remote_address, as: ip}]
        rule: per-ip
      - entries: [{key: masked_remote_address, as: ip}]
        rule: per-ip
      - entries: [{key: generic_key, value: login}, {key: remote_address, as: ip}]
        rule: login-ip
        method: /auth.v1.Auth/Login
      - entries: [{key: tenant, as: tenant}, {key: plan, as: tier}]
        rule: per-tenant
      - entries: [{key: tenant, as: tenant}]
        rule: per-tenant
      - entries: [{key: user, as: user}, {key: path, as: "header:x-path"}]
        rule: per-user-path
      - entries: [{key: generic_key, value: health}]
        unlimited: true
      - entries: [{key: generic_key, value: vip}, {key: remote_address, as: ip}]
        rule: per-ip
        name: vip
        replaces: [per-ip]
`

func newRLS(t testing.TB, policy string) (*tiers.Limiter, *manyRec) {
	t.Helper()
	p, err := tiers.Load([]byte(policy))
	if err != nil {
		t.Fatal(err)
	}
	rs := &manyRec{s: newMemstore(t, memstore.WithClock(clock.New(time.Time{})))}
	l, err := tiers.NewLimiter(rs, p)
	if err != nil {
		t.Fatal(err)
	}
	return l, rs
}

func desc(kv ...string) tiers.Descriptor {
	d := tiers.Descriptor{}
	for i := 0; i+1 < len(kv); i += 2 {
		d.Entries = append(d.Entries, tiers.DescriptorEntry{Key: kv[i], Value: kv[i+1]})
	}
	return d
}

func admitDescs(t *testing.T, l *tiers.Limiter, domain string, ds ...tiers.Descriptor) (floodgate.Decision, []tiers.DescriptorDecision) {
	t.Helper()
	out := make([]tiers.DescriptorDecision, len(ds))
	d, err := l.AdmitDescriptors(context.Background(), domain, ds, out)
	if err != nil {
		t.Fatalf("AdmitDescriptors: %v", err)
	}
	return d, out
}

// A descriptor charges the very bucket (the same key) a service's request
// with the same identity charges: the edge and the service share one
// budget.
func TestRLSSameKeyAsService(t *testing.T) {
	l, rs := newRLS(t, rlsPolicy)
	cases := []struct {
		d   tiers.Descriptor
		req *floodgate.Request
	}{
		{desc("remote_address", "192.0.2.1"), &floodgate.Request{Method: "/shop.v1.Cart/Add", Identity: floodgate.Identity{IP: netip.MustParseAddr("192.0.2.1")}}},
		{desc("remote_address", "2001:db8:1:2::7"), &floodgate.Request{Method: "GET /", Identity: floodgate.Identity{IP: netip.MustParseAddr("2001:db8:1:ffff::1")}}},
		{desc("remote_address", "::ffff:192.0.2.1"), &floodgate.Request{Method: "GET /", Identity: floodgate.Identity{IP: netip.MustParseAddr("192.0.2.1")}}},
		{desc("masked_remote_address", "2001:db8:1::/48"), &floodgate.Request{Method: "GET /", Identity: floodgate.Identity{IP: netip.MustParseAddr("2001:db8:1::9")}}},
		{desc("generic_key", "login", "remote_address", "192.0.2.1"), &floodgate.Request{Method: "/auth.v1.Auth/Login", Identity: floodgate.Identity{IP: netip.MustParseAddr("192.0.2.1")}}},
		{desc("tenant", "acme}:x={", "plan", "pro"), &floodgate.Request{Method: "GET /", Tier: "pro", Identity: floodgate.Identity{Tenant: "acme}:x={"}}},
		{desc("user", "bob", "path", "/v1/items/{id}"), &floodgate.Request{Method: "GET /", Identity: floodgate.Identity{User: "bob"},
			Headers: []floodgate.Header{{Name: "x-path", Value: "/v1/items/{id}"}}}},
	}
	for _, c := range cases {
		rs.reset()
		_, out := admitDescs(t, l, "edge", c.d)
		if out[0].Match != tiers.DescriptorLimited || !out[0].Decision.Allowed || out[0].Decision.Policy == "" {
			t.Fatalf("%v: %+v", c.d, out[0])
		}
		takes := rs.costs()
		if len(takes) != 1 || len(takes[0]) != 1 {
			t.Fatalf("%v: takes %v, want one bucket", c.d, takes)
		}
		var edgeKey string
		for k := range takes[0] {
			edgeKey = k
		}
		found := false
		for _, b := range l.Buckets(nil, c.req) {
			found = found || b.Key == edgeKey
		}
		if !found {
			t.Errorf("%v charged %q, which the service's request %+v never charges (%v)", c.d, edgeKey, c.req, l.Buckets(nil, c.req))
		}
	}
}

// Descriptor values are client-influenced: they are escaped or hashed like
// every identity, so none can make another principal's key.
func TestRLSValuesCannotForgeKeys(t *testing.T) {
	l, rs := newRLS(t, rlsPolicy)
	forged := []string{"acme", "acme}:per-tenant:token_bucket", "acme%7D", "{tenant=acme}", strings.Repeat("a", 65), "acme\x00"}
	keys := map[string]string{}
	for _, v := range forged {
		rs.reset()
		admitDescs(t, l, "edge", desc("tenant", v))
		for k := range rs.costs()[0] {
			if prev, dup := keys[k]; dup {
				t.Fatalf("tenants %q and %q share key %q", prev, v, k)
			}
			keys[k] = v
			if strings.Count(k, "{") != 1 || strings.Count(k, "}") != 1 {
				t.Errorf("tenant %q makes key %q with a hash tag of its own", v, k)
			}
		}
	}
}

func TestRLSLookup(t *testing.T) {
	l, rs := newRLS(t, rlsPolicy)
	// Unknown domain, unknown descriptor, unlimited: allowed, nothing charged.
	d, out := admitDescs(t, l, "nope", desc("remote_address", "192.0.2.1"))
	if !d.Allowed || out[0].Match != tiers.DescriptorUnknown || len(rs.costs()) != 0 {
		t.Fatalf("unknown domain: %+v %+v", d, out[0])
	}
	d, out = admitDescs(t, l, "edge", desc("remote_address", "192.0.2.1", "extra", "x"), desc("generic_key", "health"), desc("other", "x"))
	if !d.Allowed || out[0].Match != tiers.DescriptorUnknown || out[1].Match != tiers.DescriptorUnlimited || out[2].Match != tiers.DescriptorUnknown || len(rs.costs()) != 0 {
		t.Fatalf("unknown descriptors: %+v %+v", d, out)
	}
	// A fixed value is preferred to any value: generic_key=login is the login rule.
	rs.reset()
	_, out = admitDescs(t, l, "edge", desc("generic_key", "login", "remote_address", "192.0.2.1"))
	if out[0].Decision.Policy != "login-ip" || out[0].Name != "login-ip" {
		t.Fatalf("login: %+v", out[0])
	}
	// Replaces: the vip descriptor replaces per-ip's limit in the same call.
	rs.reset()
	_, out = admitDescs(t, l, "edge", desc("remote_address", "192.0.2.1"), desc("generic_key", "vip", "remote_address", "192.0.2.1"))
	if out[0].Match != tiers.DescriptorReplaced || out[1].Name != "vip" || out[1].Decision.Policy != "per-ip" {
		t.Fatalf("replaces: %+v", out)
	}
	if takes := rs.costs(); len(takes) != 1 || len(takes[0]) != 1 {
		t.Fatalf("replaces: takes %v, want the vip descriptor's bucket alone", takes)
	}
	// An ip value that is no address, or a network wider than the rule's
	// buckets, keys nothing: the rule does not apply.
	rs.reset()
	_, out = admitDescs(t, l, "edge", desc("remote_address", "not-an-ip"), desc("masked_remote_address", "2001:db8::/32"))
	for i := range out {
		if out[i].Match != tiers.DescriptorLimited || out[i].Decision.Policy != "" || out[i].Decision.Skipped != "per-ip" {
			t.Fatalf("descriptor %d: %+v, want per-ip skipped", i, out[i])
		}
	}
	if len(rs.costs()) != 0 {
		t.Fatalf("takes %v, want none", rs.costs())
	}
}

// The call is all or nothing across descriptors, and costs come from the
// descriptors (hits_addend); a tier entry picks the tenant's tier.
func TestRLSAllOrNothingAndCost(t *testing.T) {
	l, _ := newRLS(t, rlsPolicy)
	tenant := desc("tenant", "acme")
	ipd := desc("remote_address", "192.0.2.1")
	ipd.Cost = 4
	d, out := admitDescs(t, l, "edge", tenant, ipd)
	if !d.Allowed || out[1].Decision.Remaining != 1 || out[0].Decision.Remaining != 9 {
		t.Fatalf("%+v %+v", d, out)
	}
	if out[1].Bucket.Rate != 5 || out[1].Bucket.Period != time.Minute {
		t.Fatalf("bucket %+v, want 5/1m", out[1].Bucket)
	}
	ipd.Cost = 2
	d, out = admitDescs(t, l, "edge", tenant, ipd)
	if d.Allowed || d.Policy != "per-ip" || !out[0].Decision.Allowed || out[1].Decision.Allowed {
		t.Fatalf("%+v %+v", d, out)
	}
	peek := tenant
	peek.Peek = true
	_, out = admitDescs(t, l, "edge", peek)
	if out[0].Decision.Remaining != 9 {
		t.Fatalf("tenant has %d left, want 9: the denied call charged it", out[0].Decision.Remaining)
	}
	_, out = admitDescs(t, l, "edge", desc("tenant", "acme", "plan", "pro"))
	if out[0].Decision.Limit != 100 {
		t.Fatalf("pro tenant: limit %d, want 100", out[0].Decision.Limit)
	}
}

// A reload swaps the mapping with the rules.
func TestRLSReload(t *testing.T) {
	l, _ := newRLS(t, rlsPolicy)
	p, err := tiers.Load([]byte(`
rules:
  - {name: edge-ip, key: [ip], rate: 1/1m}
rls:
  - domain: gw
    descriptors:
      - entries: [{key: remote_address, as: ip}]
        rule: edge-ip
`))
	if err != nil {
		t.Fatal(err)
	}
	if err := l.SetPolicy(p); err != nil {
		t.Fatal(err)
	}
	if _, out := admitDescs(t, l, "edge", desc("remote_address", "192.0.2.1")); out[0].Match != tiers.DescriptorUnknown {
		t.Fatalf("old domain still mapped: %+v", out[0])
	}
	if _, out := admitDescs(t, l, "gw", desc("remote_address", "192.0.2.1")); out[0].Decision.Policy != "edge-ip" {
		t.Fatalf("new domain: %+v", out[0])
	}
}

func TestRLSLoadErrors(t *testing.T) {
	base := `
tiers: {free: {rate: 10/1m}}
default_tier: free
rules:
  - {name: per-ip, key: [ip], rate: 5/1m}
  - {name: login, match: {method: /a.v1.A/Login}, key: [ip], rate: 5/1m}
  - {name: free-only, match: {tier: [free]}, key: [user], rate: 5/1m}
rls:
`
	cases := []struct{ rls, want string }{
		{`  - domain: e
    descriptors:
      - entries: [{key: remote_address, as: ip}]
        rule: nope`, `rls[0].descriptors[0].rule: no rule is named "nope", at line 12`},
		{`  - domain: e
    descriptors:
      - entries: [{key: remote_address}]
        rule: per-ip`, `rls[0].descriptors[0].entries[0]: matches any value but keys none`},
		{`  - domain: e
    descriptors:
      - entries: [{key: tenant, as: tenant}]
        rule: per-ip`, `rule "per-ip" is not keyed on tenant (its key is [ip]): the value would key nothing, at line 11`},
		{`  - domain: e
    descriptors:
      - entries: [{key: generic_key, value: x}]
        rule: per-ip`, `rls[0].descriptors[0].entries: no entry fills ip, which rule "per-ip" is keyed on`},
		{`  - domain: e
    descriptors:
      - entries: [{key: remote_address, as: ip}]
        rule: login`, `rls[0].descriptors[0].method: rule "login" matches method "/a.v1.A/Login": name the method`},
		{`  - domain: e
    descriptors:
      - entries: [{key: remote_address, as: ip}]
        rule: login
        method: /a.v1.A/Other`, `"/a.v1.A/Other" does not match rule "login"'s match.method "/a.v1.A/Login"`},
		{`  - domain: e
    descriptors:
      - entries: [{key: remote_address, as: ip}]
        rule: per-ip
      - entries: [{key: remote_address, as: ip}]
        rule: per-ip`, `rls[0].descriptors[1].entries: the same entries as rls[0].descriptors[0]`},
		{`  - domain: e
    descriptors:
      - entries: [{key: k, value: v}]
        unlimited: true
  - domain: e
    descriptors:
      - entries: [{key: k, value: v}]
        unlimited: true`, `rls[1].domain: "e" is already the domain of rls[0], at line 13`},
		{`  - domain: e
    descriptors:
      - entries: [{key: remote_address, as: ip, value: x}]
        rule: per-ip`, `set value (the value it must have) or as (what its value fills), not both`},
		{`  - domain: e
    descriptors:
      - entries: [{key: remote_address, as: ipp}]
        rule: per-ip`, `rls[0].descriptors[0].entries[0].as: unknown "ipp"`},
		{`  - domain: e
    descriptors:
      - entries: [{key: x, as: "header:authorization"}]
        rule: per-ip`, `cannot be matched or keyed on`},
		{`  - domain: e
    descriptors:
      - entries: [{key: remote_address, as: ip}]
        rule: per-ip
        replaces: [per-ip]`, `a limit cannot replace itself`},
		{`  - domain: e
    descriptors:
      - entries: [{key: remote_address, as: ip}]
        rule: per-ip
        limit: 5`, `rls[0].descriptors[0].limit: unknown field, at line 13`},
		{`  - domain: e
    descriptors:
      - entries: [{key: user, as: user}, {key: plan, as: tier}, {key: plan2, as: tier}]
        rule: free-only`, `tier is already filled by entries[1]`},
	}
	for _, c := range cases {
		_, err := tiers.Load([]byte(base + c.rls))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s\n  error %v\n  want %q", c.rls, err, c.want)
		}
	}
}

// FuzzRLSLoad: no policy text, rls: section included, panics the loader.
func FuzzRLSLoad(f *testing.F) {
	f.Add([]byte(rlsPolicy))
	f.Add([]byte("rules: []\nrls:\n  - domain: d\n    descriptors:\n      - entries: [{key: k, value: v}]\n        unlimited: true\n"))
	f.Add([]byte("rules: [{name: r, key: [ip], rate: 1/1s}]\nrls: [{domain: d, descriptors: [{entries: [{key: a, as: ip}], rule: r, replaces: [x]}]}]\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		_, _ = tiers.Load(data)
	})
}

// FuzzRLSDescriptorValues: whatever a descriptor carries, the call is
// decided without panic and every key it charges has exactly one hash tag.
func FuzzRLSDescriptorValues(f *testing.F) {
	f.Add("remote_address", "192.0.2.1", "tenant", "acme", uint8(1))
	f.Add("masked_remote_address", "2001:db8::/48", "user", "}{:=%", uint8(0))
	f.Add("generic_key", "login", "remote_address", "::ffff:1.2.3.4", uint8(3))
	l, rs := newRLS(f, rlsPolicy)
	f.Fuzz(func(t *testing.T, k1, v1, k2, v2 string, cost uint8) {
		rs.reset()
		ds := []tiers.Descriptor{
			{Entries: []tiers.DescriptorEntry{{Key: k1, Value: v1}}, Cost: int64(cost)},
			{Entries: []tiers.DescriptorEntry{{Key: k1, Value: v1}, {Key: k2, Value: v2}}},
			{Entries: []tiers.DescriptorEntry{{Key: k2, Value: v2}}, Peek: cost%2 == 0},
		}
		out := make([]tiers.DescriptorDecision, len(ds))
		if _, err := l.AdmitDescriptors(context.Background(), "edge", ds, out); err != nil && !strings.Contains(err.Error(), "capacity") {
			t.Fatalf("%v", err)
		}
		for _, take := range rs.costs() {
			for k := range take {
				if strings.Count(k, "{") != 1 || strings.Count(k, "}") != 1 || !strings.HasPrefix(k, "fg:{") {
					t.Fatalf("key %q", k)
				}
			}
		}
	})
}

// A no_limit descriptor is matched, charged nowhere and answered as an
// unknown one; it names nothing else.
func TestRLSNoLimit(t *testing.T) {
	_, err := tiers.Load([]byte(`
rules: [{name: per-ip, key: [ip], rate: 1/1m}]
rls:
  - domain: edge
    descriptors:
      - {entries: [{key: generic_key, value: status}], no_limit: true, rule: per-ip}
`))
	if err == nil || !strings.Contains(err.Error(), "no_limit") {
		t.Fatalf("no_limit with a rule: %v", err)
	}
}

// Wildcard values match by prefix, after a fixed value and before any
// value; a deny descriptor needs a name and a window, and no rule.
func TestRLSWildcardAndDeny(t *testing.T) {
	p, err := tiers.Load([]byte(`
rules:
  - {name: per-path, key: ["header:path"], rate: 1/1m, algorithm: fixed_window}
  - {name: shared, rate: 1/1m, algorithm: fixed_window}
rls:
  - domain: edge
    descriptors:
      - {entries: [{key: path, value: "/api/*", as: "header:path"}], rule: per-path}
      - {entries: [{key: path, value: "/s/*"}], rule: shared}
      - {entries: [{key: path, value: "/api/x"}], no_limit: true}
      - {entries: [{key: path, value: "/deny*"}], deny: {window: 1m}, name: nope}
      - {entries: [{key: path}], unlimited: true}
`))
	if err != nil {
		t.Fatal(err)
	}
	store, err := memstore.New()
	if err != nil {
		t.Fatal(err)
	}
	l, err := tiers.NewLimiter(store, p)
	if err != nil {
		t.Fatal(err)
	}
	call := func(path string) (bool, tiers.DescriptorDecision) {
		out := make([]tiers.DescriptorDecision, 1)
		d, err := l.AdmitDescriptors(context.Background(), "edge", []tiers.Descriptor{{Entries: []tiers.DescriptorEntry{{Key: "path", Value: path}}}}, out)
		if err != nil {
			t.Fatal(err)
		}
		return d.Allowed, out[0]
	}
	for _, c := range []struct {
		path    string
		allowed bool
		match   tiers.DescriptorMatch
		policy  string
	}{
		{"/api/a", true, tiers.DescriptorLimited, "per-path"},
		{"/api/a", false, tiers.DescriptorLimited, "per-path"},
		{"/api/b", true, tiers.DescriptorLimited, "per-path"},
		{"/api/x", true, tiers.DescriptorNoLimit, ""},
		{"/s/a", true, tiers.DescriptorLimited, "shared"},
		{"/s/b", false, tiers.DescriptorLimited, "shared"},
		{"/deny/me", false, tiers.DescriptorLimited, "nope"},
		{"/other", true, tiers.DescriptorUnlimited, ""},
	} {
		allowed, dd := call(c.path)
		if allowed != c.allowed || dd.Match != c.match || dd.Decision.Policy != c.policy {
			t.Fatalf("%s: allowed %v, match %v, policy %q; want %v, %v, %q", c.path, allowed, dd.Match, dd.Decision.Policy, c.allowed, c.match, c.policy)
		}
	}
	for _, bad := range []string{
		`{entries: [{key: k, value: v}], deny: {window: 1m}}`,
		`{entries: [{key: k, value: v}], deny: {window: 1m}, name: n, rule: r}`,
		`{entries: [{key: k, value: v}], deny: {}, name: n}`,
	} {
		if _, err := tiers.Load([]byte("rules: [{name: r, rate: 1/1m}]\nrls: [{domain: d, descriptors: [" + bad + "]}]\n")); err == nil {
			t.Errorf("%s: loaded", bad)
		}
	}
}

// takeOnly hides a store's Settle.
type takeOnly struct{ quota.Store }

// A descriptor that gives back over a store that cannot settle gives
// nothing back and says so; the call is still decided.
func TestRLSGiveBackNeedsSettler(t *testing.T) {
	p, err := tiers.Load([]byte(`
rules: [{name: per-user, key: [user], rate: 5/1m, algorithm: fixed_window}]
rls: [{domain: edge, descriptors: [{entries: [{key: user, as: user}], rule: per-user}]}]
`))
	if err != nil {
		t.Fatal(err)
	}
	store, err := memstore.New()
	if err != nil {
		t.Fatal(err)
	}
	l, err := tiers.NewLimiter(takeOnly{store}, p)
	if err != nil {
		t.Fatal(err)
	}
	out := make([]tiers.DescriptorDecision, 2)
	ds := []tiers.Descriptor{{Entries: []tiers.DescriptorEntry{{Key: "user", Value: "bob"}}, Cost: 1, GiveBack: true}, {Entries: []tiers.DescriptorEntry{{Key: "user", Value: "ann"}}, Cost: 1}}
	d, err := l.AdmitDescriptors(context.Background(), "edge", ds, out)
	if err == nil || !strings.Contains(err.Error(), "cannot give units back") || !d.Allowed || out[1].Decision.Remaining != 4 {
		t.Fatalf("%+v, %v", d, err)
	}
}

// A call a deny mapping denies charges nothing, and its other descriptors
// are only read: each answers with its limit and what it has left, and
// denies when what it has left is below its cost.
func TestRLSDenyReadsOthers(t *testing.T) {
	l, rs := newRLS(t, `
rules:
  - {name: per-user, key: [user], rate: 3/1m, algorithm: fixed_window}
  - {name: watch, key: [ip], rate: 1/1m, algorithm: fixed_window, shadow: true}
rls:
  - domain: edge
    descriptors:
      - {entries: [{key: blocked}], deny: {window: 1m}, name: blocked}
      - {entries: [{key: user, as: user}], rule: per-user}
      - {entries: [{key: remote_address, as: ip}], rule: watch}
`)
	user, ip, blocked := desc("user", "u1"), desc("remote_address", "10.0.0.1"), desc("blocked", "x")
	if d, _ := admitDescs(t, l, "edge", user, ip); !d.Allowed {
		t.Fatalf("first call denied: %+v", d)
	}
	rs.reset()
	d, out := admitDescs(t, l, "edge", blocked, user, ip)
	if d.Allowed || d.Policy != "blocked" {
		t.Fatalf("call: %+v; want denied by blocked", d)
	}
	if u := out[1]; !u.Decision.Allowed || u.Decision.Policy != "per-user" || u.Decision.Remaining != 2 || u.Bucket.Rate != 3 || u.Bucket.Period != time.Minute {
		t.Fatalf("user: %+v; want allowed by per-user, 2 remaining of 3/1m", u)
	}
	if w := out[2]; !w.Decision.Allowed || !w.Decision.Shadow || w.Decision.Policy != "watch" || w.Bucket.Rate != 1 {
		t.Fatalf("shadow: %+v; want a shadow would-be denial by watch", w)
	}
	for _, take := range rs.costs() {
		for k, c := range take {
			if c != 0 {
				t.Fatalf("a denied call charged %s %d", k, c)
			}
		}
	}
	over := user
	over.Cost = 3
	if _, out := admitDescs(t, l, "edge", blocked, over); out[1].Decision.Allowed || out[1].Decision.Policy != "per-user" {
		t.Fatalf("user of cost 3 with 2 left: %+v; want denied by per-user", out[1])
	}
	if _, out := admitDescs(t, l, "edge", user); !out[0].Decision.Allowed || out[0].Decision.Remaining != 1 {
		t.Fatalf("after the denied calls: %+v; want 1 remaining", out[0])
	}
}

// When an enforced rule denies a call, its shadow descriptors are read,
// charging nothing, so one that would deny says so.
func TestRLSShadowBesideDeny(t *testing.T) {
	l, rs := newRLS(t, `
rules:
  - {name: per-user, key: [user], rate: 1/1m, algorithm: fixed_window}
  - {name: watch, key: [ip], rate: 1/1m, algorithm: fixed_window, shadow: true}
  - {name: roomy, key: [tenant], rate: 5/1m, algorithm: fixed_window, shadow: true}
rls:
  - domain: edge
    descriptors:
      - {entries: [{key: user, as: user}], rule: per-user}
      - {entries: [{key: remote_address, as: ip}], rule: watch}
      - {entries: [{key: tenant, as: tenant}], rule: roomy}
`)
	user, ip, tenant := desc("user", "u1"), desc("remote_address", "10.0.0.1"), desc("tenant", "t")
	if d, _ := admitDescs(t, l, "edge", user, ip, tenant); !d.Allowed {
		t.Fatalf("first call denied: %+v", d)
	}
	rs.reset()
	d, out := admitDescs(t, l, "edge", user, ip, tenant)
	if d.Allowed || out[0].Decision.Allowed || out[0].Decision.Policy != "per-user" {
		t.Fatalf("second call: %+v, user %+v; want denied by per-user", d, out[0])
	}
	if w := out[1]; !w.Decision.Allowed || !w.Decision.Shadow || w.Decision.Policy != "watch" || w.Bucket.Rate != 1 {
		t.Fatalf("shadow over its limit: %+v; want a shadow would-be denial by watch", w)
	}
	if r := out[2]; !r.Decision.Allowed || r.Decision.Shadow || r.Decision.Policy != "" {
		t.Fatalf("shadow within its limit: %+v; want no policy", r)
	}
	for _, take := range rs.costs() {
		for k, c := range take {
			if strings.Contains(k, "watch") || strings.Contains(k, "roomy") {
				if c != 0 {
					t.Fatalf("a denied call charged the shadow bucket %s %d", k, c)
				}
			}
		}
	}
}

// A descriptor's limit of its own whose entries and period match a
// mapping's fixed-window rule counts in that rule's bucket, as
// envoyproxy/ratelimit counts an override in the configured limit's
// counter, each judged at its own rate; another period, or a rule of
// another algorithm, keeps its own bucket.
func TestRLSOverrideSharesRuleBucket(t *testing.T) {
	l, _ := newRLS(t, `
rules:
  - {name: per-ip, key: [ip], rate: 6/1m, algorithm: fixed_window}
  - {name: per-user, key: [user], rate: 6/1m}
rls:
  - domain: edge
    descriptors:
      - {entries: [{key: remote_address, as: ip}], rule: per-ip}
      - {entries: [{key: user, as: user}], rule: per-user}
`)
	override := func(d tiers.Descriptor, rate int64, period time.Duration) tiers.Descriptor {
		d.Limit = &quota.Limit{Rate: rate, Period: period}
		return d
	}
	ip := desc("remote_address", "192.0.2.30")
	for range 3 {
		admitDescs(t, l, "edge", override(ip, 10, time.Minute))
	}
	_, out := admitDescs(t, l, "edge", override(ip, 10, time.Minute))
	if d := out[0].Decision; !d.Allowed || d.Policy != tiers.PolicyDescriptorLimit || d.Remaining != 6 || out[0].Bucket.Rate != 10 || out[0].Name != "" {
		t.Fatalf("4th override call: %+v; want allowed at its own limit of 10, 6 remaining", out[0])
	}
	if _, out := admitDescs(t, l, "edge", ip); out[0].Decision.Remaining != 1 || out[0].Decision.Policy != "per-ip" {
		t.Fatalf("the configured limit after 4 override hits: %+v; want 1 remaining of 6", out[0])
	}
	if _, out := admitDescs(t, l, "edge", override(ip, 10, time.Hour)); out[0].Decision.Remaining != 9 {
		t.Fatalf("an override of another period: %+v; want its own bucket, 9 remaining", out[0])
	}
	user := desc("user", "u1")
	admitDescs(t, l, "edge", override(user, 10, time.Minute))
	if _, out := admitDescs(t, l, "edge", user); out[0].Decision.Remaining != 5 {
		t.Fatalf("a token-bucket rule after an override: %+v; want untouched by it, 5 remaining", out[0])
	}
}
