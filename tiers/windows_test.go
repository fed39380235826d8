package tiers_test

import (
	"errors"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/testing/clock"
	"github.com/floodgate-go/floodgate/tiers"
	"github.com/floodgate-go/floodgate/tiers/memstore"
)

// quotaNames lists the Policy of each of d.Quotas(), with a '!' after a
// violated one.
func quotaNames(d floodgate.Decision) []string {
	var out []string
	for _, q := range d.Quotas() {
		n := q.Policy
		if q.Violated {
			n += "!"
		}
		out = append(out, n)
	}
	return out
}

// Two windows of one rule are two levels of one take: a deny by the hour
// window charges nothing at the minute window, and the reverse.
func TestWindowsAllOrNothing(t *testing.T) {
	clk := clock.New(time.Time{})
	s := newMemstore(t, memstore.WithClock(clk))
	l := mustLimiter(t, s, `
rules:
  - {name: plan, key: [user], rate: [3/1m, 5/1h]}
`)
	r := &floodgate.Request{Method: "/a.B/C", Identity: floodgate.Identity{User: "bob"}}
	const minute, hour = "fg:{user=bob}:plan:token_bucket:1m", "fg:{user=bob}:plan:token_bucket:1h"
	if got := keys(l.Buckets(nil, r)); !slices.Equal(got, []string{minute, hour}) {
		t.Fatalf("buckets %q, want the minute then the hour window, each keyed by its period", got)
	}

	for i, want := range []int64{2, 1, 0} {
		d := admit(t, l, r)
		if !d.Allowed || d.Policy != "plan/1m" || d.Remaining != want || d.Limit != 3 || d.Window != time.Minute {
			t.Fatalf("request %d: %+v, want allowed, plan/1m binding with %d left", i, d, want)
		}
	}
	// Third request: both windows listed, the binding (minute) first.
	before := remaining(t, s, l, r)
	if before[minute] != 0 || before[hour] != 2 {
		t.Fatalf("after 3: %v, want minute 0, hour 2", before)
	}

	// The minute window denies: 1 token at 3/1m is 20 s away. The hour
	// window is not charged.
	d := admit(t, l, r)
	if d.Allowed || d.Policy != "plan/1m" || d.RetryAfter != 20*time.Second || d.Limit != 3 {
		t.Fatalf("4th: %+v, want a deny by plan/1m after 20s", d)
	}
	if got := quotaNames(d); !slices.Equal(got, []string{"plan/1m!", "plan/1h"}) {
		t.Errorf("4th: quotas %q", got)
	}
	if q := d.Quotas()[1]; q.Remaining != 2 || q.Limit != 5 || q.Window != time.Hour || q.RetryAfter != 0 {
		t.Errorf("4th: hour window %+v, want 2 of 5 left", q)
	}
	if after := remaining(t, s, l, r); after[hour] != 2 || after[minute] != 0 {
		t.Fatalf("after the minute deny: %v, want the hour window untouched at 2", after)
	}

	// A minute later the minute window is full again (3), the hour window
	// has 2 + 1/12. Two requests pass; the next is denied by the hour
	// window, which needs 11/12 of a token: 11 minutes at 5/1h.
	clk.Advance(time.Minute)
	for i := range 2 {
		if d := admit(t, l, r); !d.Allowed {
			t.Fatalf("after a minute, request %d: %+v", i, d)
		}
	}
	d = admit(t, l, r)
	if d.Allowed || d.Policy != "plan/1h" || d.RetryAfter != 11*time.Minute || d.Limit != 5 || d.Window != time.Hour {
		t.Fatalf("hour deny: %+v, want plan/1h after 11m", d)
	}
	if got := quotaNames(d); !slices.Equal(got, []string{"plan/1h!", "plan/1m"}) {
		t.Errorf("hour deny: quotas %q, want the hour window (violated) first", got)
	}
	after := remaining(t, s, l, r)
	if after[minute] != 1 || after[hour] != 0 {
		t.Fatalf("after the hour deny: %v, want minute 1 (not charged), hour 0", after)
	}
	// 11 minutes later, exactly one more passes.
	clk.Advance(11 * time.Minute)
	if d := admit(t, l, r); !d.Allowed || d.Policy != "plan/1h" || d.Remaining != 0 {
		t.Fatalf("11m later: %+v", d)
	}
	if d := admit(t, l, r); d.Allowed || d.Policy != "plan/1h" {
		t.Fatalf("and then: %+v", d)
	}
}

// Windows of different rules and the other rules of a take: a deny by one
// rule's hour window charges nothing at any other rule or window, and
// every violated window of every rule is listed, the binding first, while
// a rule that hides its quota is never named.
func TestWindowsAcrossRules(t *testing.T) {
	clk := clock.New(time.Time{})
	s := newMemstore(t, memstore.WithClock(clk))
	l := mustLimiter(t, s, `
rules:
  - {name: ip, key: [ip], rate: 100/1s}
  - {name: user, key: [user], rate: [2/1s, 3/1h], algorithm: fixed_window}
  - {name: tenant, key: [tenant], rate: [10/1s, 3/24h], algorithm: fixed_window}
  - {name: secret, key: [tenant], rate: 3/1h, hide_quota: true, algorithm: fixed_window}
`)
	r := &floodgate.Request{Method: "/a.B/C", Identity: floodgate.Identity{User: "u", Tenant: "t", IP: ip("192.0.2.1")}}
	for range 3 {
		if d := admit(t, l, r); !d.Allowed {
			t.Fatalf("%+v", d)
		}
		clk.Advance(time.Second)
	}
	before := remaining(t, s, l, r)
	// user/1h (3 used), tenant/1d (3 used) and secret (3 used) deny;
	// ip, user/1s and tenant/1s would allow.
	d := admit(t, l, r)
	if d.Allowed {
		t.Fatalf("4th: %+v", d)
	}
	// The binding deny is the longest wait: tenant/1d (to the end of the
	// day's window).
	if d.Policy != "tenant/24h" || d.RetryAfter != 24*time.Hour-3*time.Second {
		t.Errorf("4th: binding %q after %s, want tenant/24h after 23h59m57s", d.Policy, d.RetryAfter)
	}
	if got := quotaNames(d); !slices.Equal(got, []string{"tenant/24h!", "tenant/1s", "user/1h!"}) {
		t.Errorf("4th: quotas %q, want tenant's windows then user/1h, without the hidden secret", got)
	}
	after := remaining(t, s, l, r)
	for k, v := range before {
		if after[k] != v {
			t.Errorf("%s: %d -> %d, want untouched", k, v, after[k])
		}
	}
}

// Tiers and overrides have windows too; a limit with one window keeps its
// name and its key exactly as before.
func TestWindowsTiersAndOverrides(t *testing.T) {
	clk := clock.New(time.Time{})
	s := newMemstore(t, memstore.WithClock(clk))
	l := mustLimiter(t, s, `
tiers:
  free: {rate: [2/1m, 3/1h], burst: [2, 3]}
  pro:  {rate: 100/1m}
default_tier: free
rules:
  - {name: tenant-plan, key: [tenant], rate: tier}
  - {name: global, rate: [1000/1s, 5000/1h]}
overrides:
  - {rule: tenant-plan, key: {tenant: acme}, rate: [4/1m, 5/24h]}
`)
	req := func(tenant, tier string) *floodgate.Request {
		return &floodgate.Request{Method: "/a.B/C", Tier: tier, Identity: floodgate.Identity{Tenant: tenant}}
	}
	for _, tc := range []struct {
		r    *floodgate.Request
		keys []string
	}{
		{req("t1", "free"), []string{"fg:{tenant=t1}:tenant-plan:token_bucket:1m", "fg:{tenant=t1}:tenant-plan:token_bucket:1h", "fg:{global}:token_bucket:1s", "fg:{global}:token_bucket:1h"}},
		{req("t2", "pro"), []string{"fg:{tenant=t2}:tenant-plan:token_bucket", "fg:{global}:token_bucket:1s", "fg:{global}:token_bucket:1h"}},
		{req("acme", "pro"), []string{"fg:{tenant=acme}:tenant-plan:token_bucket:1m", "fg:{tenant=acme}:tenant-plan:token_bucket:24h", "fg:{global}:token_bucket:1s", "fg:{global}:token_bucket:1h"}},
	} {
		if got := keys(l.Buckets(nil, tc.r)); !slices.Equal(got, tc.keys) {
			t.Errorf("%s/%s: keys %q, want %q", tc.r.Identity.Tenant, tc.r.Tier, got, tc.keys)
		}
	}
	// The pro tier has one window: named by the rule alone.
	if d := admit(t, l, req("t2", "pro")); !d.Allowed || d.Policy != "tenant-plan" || d.Quotas() != nil {
		t.Errorf("pro: %+v, want tenant-plan alone", d)
	}
	// free: two requests, then a deny by the minute window.
	for range 2 {
		admit(t, l, req("t1", "free"))
	}
	d := admit(t, l, req("t1", "free"))
	if d.Allowed || d.Policy != "tenant-plan/1m" || d.RetryAfter != 30*time.Second {
		t.Errorf("free 3rd: %+v", d)
	}
	if got := quotaNames(d); !slices.Equal(got, []string{"tenant-plan/1m!", "tenant-plan/1h"}) {
		t.Errorf("free 3rd: quotas %q", got)
	}
	// acme's override: 4 a minute, 5 a day.
	for range 4 {
		admit(t, l, req("acme", "pro"))
	}
	if d := admit(t, l, req("acme", "pro")); d.Allowed || d.Policy != "tenant-plan/1m" || d.Limit != 4 {
		t.Errorf("acme 5th: %+v", d)
	}
	clk.Advance(time.Minute)
	admit(t, l, req("acme", "pro"))
	if d := admit(t, l, req("acme", "pro")); d.Allowed || d.Policy != "tenant-plan/24h" || d.Limit != 5 {
		t.Errorf("acme 7th: %+v, want a deny by the override's day window", d)
	}
}

// Every key of a policy that uses no windows is what it was before
// windows existed: byte for byte.
func TestKeysWithoutWindowsUnchanged(t *testing.T) {
	l := mustLimiter(t, newMemstore(t), `
tiers:
  free: {rate: 10/1m}
default_tier: free
rules:
  - {name: all, key: [tenant, user, api_key, ip, endpoint], rate: 1/1s}
  - {name: plan, key: [tenant], rate: tier}
  - {name: g, rate: 5/1s, algorithm: gcra}
  - {name: gt, rate: tier}
`)
	got := keys(l.Buckets(nil, &floodgate.Request{Method: "/a.B/C", Identity: floodgate.Identity{Tenant: "t", User: "u", APIKey: "k", IP: ip("10.0.0.1")}}))
	want := []string{
		"fg:{tenant=t}:all:user=u:api_key=#8254c329a92850f6d539dd376f4816ee:ip=10.0.0.1:endpoint=%2Fa.B%2FC:token_bucket",
		"fg:{tenant=t}:plan:token_bucket",
		"fg:{g}:gcra",
		"fg:{gt}:token_bucket",
	}
	if !slices.Equal(got, want) {
		t.Errorf("keys\n got %q\nwant %q", got, want)
	}
}

func TestWindowsLoadErrors(t *testing.T) {
	for _, tc := range []struct {
		name, yaml, want string
	}{
		{"same period", "rules:\n  - name: a\n    rate: [1/1m, 2/60s]\n",
			"rules[0].rate[1]: rate[0] has the same period, 1m: the windows of one limit need distinct periods, at line 3"},
		{"bad window", "rules:\n  - name: a\n    rate: [1/1m,\n      5/fortnight]\n",
			`rules[0].rate[1]: "5/fortnight" is not N/duration (the duration is 500ms, 10s, 1m, 1h, 1d or 1w; day, week, month or year for calendar windows), at line 4`},
		{"tier in a list", "rules:\n  - name: a\n    rate: [tier, 1/1m]\n",
			`rules[0].rate[0]: "tier" cannot be one window of several (give the tiers several windows instead), at line 3`},
		{"empty list", "rules:\n  - name: a\n    rate: []\n",
			"rules[0].rate: list at least one rate (rate: [100/1m, 1000/1h]), at line 3"},
		{"scalar burst", "rules:\n  - name: a\n    rate: [1/1m, 2/1h]\n    burst: 5\n",
			"rules[0].burst: with a list of rates, burst is a list too, one per window (burst: [20, 1000]), at line 4"},
		{"burst count", "rules:\n  - name: a\n    rate: [1/1m, 2/1h]\n    burst: [5]\n",
			"rules[0].burst: 1 bursts for 2 rates: give one per window, at line 4"},
		{"burst list alone", "rules:\n  - name: a\n    rate: 1/1m\n    burst: [5, 6]\n",
			"rules[0].burst: a list of bursts needs a list of rates, one per window (rate: [100/1m, 1000/1h]), at line 4"},
		{"window burst on a window algorithm", "rules:\n  - name: a\n    algorithm: fixed_window\n    rate: [1/1m, 2/1h]\n    burst: [1, 2]\n",
			"rules[0].burst[0]: fixed_window has no burst; remove burst (its capacity is the rate, 1), at line 5\n" +
				"rules[0].burst[1]: fixed_window has no burst; remove burst (its capacity is the rate, 2), at line 5"},
		{"cost above a window", "rules:\n  - name: a\n    rate: [100/1m, 5/1h]\n    cost: 6\n",
			"rules[0].cost: 6 exceeds the rule's capacity 5 (burst 5): such a request could never pass, at line 4"},
		{"method cost above a window", "rules:\n  - {name: a, rate: [100/1m, 5/1h]}\nmethods:\n  /a.B/C: {cost: 6}\n",
			`methods["/a.B/C"].cost: 6 exceeds the capacity 5 of rule "a": such a request could never pass, at line 4`},
		{"override cost above a window", "rules:\n  - {name: a, key: [user], rate: 100/1m, cost: 5}\noverrides:\n  - {rule: a, key: {user: x}, rate: [100/1m, 4/1h]}\n",
			`overrides[0].rate: capacity 4 (burst 4) is less than rule "a" cost 5: such a request could never pass, at line 4`},
		{"tier rule with windows", "tiers: {free: {rate: [1/1s, 10/1h]}}\ndefault_tier: free\nrules:\n  - {name: a, rate: tier, cost: 2}\n",
			`rules[0].cost: 2 exceeds the capacity 1 of tier "free": such a request could never pass, at line 4`},
		{"tier window", "tiers:\n  free:\n    rate: [1/1s, 0/1h]\nrules: []\n",
			"tiers.free.rate[1]: rate 0 is out of range [1, 1000000000], at line 3"},
		{"override window", "rules:\n  - {name: a, key: [user], rate: 1/1s}\noverrides:\n  - rule: a\n    key: {user: x}\n    rate: [1/1s, 1/0s]\n",
			"overrides[0].rate[1]: period 0s is out of range [1ms, 8784h0m0s], at line 6"},
		{"too many", "rules:\n  - name: a\n    rate: [1/1s, 1/2s, 1/3s, 1/4s, 1/5s, 1/6s, 1/7s, 1/8s, 1/9s]\n",
			"rules[0].rate: 9 windows; at most 8, at line 3"},
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
	// In Go: Windows with Rate.
	p := &tiers.Policy{Rules: []tiers.Rule{{Name: "a", Rate: tiers.Rate{N: 1, Period: time.Second}, Windows: []tiers.Window{{Rate: tiers.Rate{N: 1, Period: time.Hour}}}}}}
	if err := p.Validate(); err == nil || err.Error() != "rules[0].rate: set rate and burst, or windows, not both" {
		t.Errorf("Validate = %v", err)
	}
	// One window in a list is one window: named and keyed as a plain rate.
	l := mustLimiter(t, newMemstore(t), "rules:\n  - {name: a, key: [user], rate: [5/1m], burst: [2]}\n")
	bs := l.Buckets(nil, &floodgate.Request{Identity: floodgate.Identity{User: "u"}})
	if len(bs) != 1 || bs[0].Key != "fg:{user=u}:a:token_bucket" || bs[0].Limit.Burst != 2 {
		t.Errorf("one window in a list: %+v", bs)
	}
	if !strings.Contains(mustLoadErr(t, "rules:\n  - {name: a, rate: [1/1m, 1/1h], consistency: async, algorithm: fixed_window}\n"), "async needs token_bucket or gcra") {
		t.Error("async with a window algorithm and windows was accepted")
	}
}

func mustLoadErr(t *testing.T, y string) string {
	t.Helper()
	_, err := tiers.Load([]byte(y))
	if err == nil {
		t.Fatalf("Load accepted:\n%s", y)
	}
	return err.Error()
}

func ip(s string) netip.Addr { return netip.MustParseAddr(s) }
