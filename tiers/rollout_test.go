package tiers_test

import (
	"net/netip"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/testing/clock"
	"github.com/floodgate-go/floodgate/tiers"
	"github.com/floodgate-go/floodgate/tiers/memstore"
)

func rolloutPolicy(percent string) string {
	p := "rules:\n  - {name: per-user, key: [user], rate: 1/1h"
	if percent != "" {
		p += ", enforce_percent: " + percent
	}
	return p + "}\n"
}

// enforcedUsers sends one more request for each user (whose bucket is
// already empty) and returns the users it denied; every other one must be
// allowed as a shadow denial naming the rule.
func enforcedUsers(t *testing.T, l *tiers.Limiter, users []string) []string {
	t.Helper()
	var denied []string
	for _, u := range users {
		d := admit(t, l, &floodgate.Request{Method: "/a.B/C", Identity: floodgate.Identity{User: u}})
		switch {
		case !d.Allowed && !d.Shadow && d.Policy == "per-user" && d.RetryAfter > 0:
			denied = append(denied, u)
		case d.Allowed && d.Shadow && d.Policy == "per-user" && d.Remaining == 0 && d.RetryAfter == 0:
		default:
			t.Fatalf("user %s: %+v, want a deny or a shadow deny by per-user", u, d)
		}
	}
	return denied
}

// enforce_percent denies only its share of keys, reports the others as
// shadow denials, keeps every key's choice across requests, instances and
// reloads, and widening it only adds keys.
func TestEnforcePercent(t *testing.T) {
	clk := clock.New(time.Time{})
	s := newMemstore(t, memstore.WithClock(clk))
	l := mustLimiter(t, s, rolloutPolicy("30"))
	users := make([]string, 400)
	for i := range users {
		users[i] = "user-" + strconv.Itoa(i)
		// The first request of each user passes, enforced or not, and is
		// charged: a shadow rule that allows is charged too.
		if d := admit(t, l, &floodgate.Request{Method: "/a.B/C", Identity: floodgate.Identity{User: users[i]}}); !d.Allowed || d.Shadow || d.Remaining != 0 {
			t.Fatalf("first request of %s: %+v", users[i], d)
		}
	}
	at30 := enforcedUsers(t, l, users)
	// 30% of 400 is 120; the hash is fixed, so this is an exact count
	// for these names, checked against a band that any fair hash meets.
	if n := len(at30); n < 90 || n > 150 {
		t.Fatalf("30%%: %d of 400 users enforced, want about 120", n)
	}
	// The same users again: the same choice, and nothing was charged.
	if again := enforcedUsers(t, l, users); !slices.Equal(again, at30) {
		t.Fatalf("30%% again: %d enforced, not the same users", len(again))
	}
	// Another instance (limiter and store) decides the same users.
	other := mustLimiter(t, newMemstore(t, memstore.WithClock(clk)), rolloutPolicy("30"))
	for _, u := range users {
		admit(t, other, &floodgate.Request{Method: "/a.B/C", Identity: floodgate.Identity{User: u}})
	}
	if got := enforcedUsers(t, other, users); !slices.Equal(got, at30) {
		t.Fatalf("another instance enforces %d other users", len(got))
	}

	// Hot reload to 60%: every user enforced at 30% still is.
	if err := l.SetPolicy(mustLoad(t, rolloutPolicy("60"))); err != nil {
		t.Fatal(err)
	}
	at60 := enforcedUsers(t, l, users)
	for _, u := range at30 {
		if !slices.Contains(at60, u) {
			t.Fatalf("%s enforced at 30%% but not at 60%%", u)
		}
	}
	if n := len(at60); n <= len(at30) || n < 200 || n > 280 {
		t.Fatalf("60%%: %d of 400 enforced (30%%: %d)", n, len(at30))
	}
	// 100 (or no enforce_percent): everyone.
	if err := l.SetPolicy(mustLoad(t, rolloutPolicy("100"))); err != nil {
		t.Fatal(err)
	}
	if got := enforcedUsers(t, l, users); len(got) != len(users) {
		t.Fatalf("100%%: %d enforced", len(got))
	}
	// Back to 1%: a few, all among the 30% ones.
	if err := l.SetPolicy(mustLoad(t, rolloutPolicy("1"))); err != nil {
		t.Fatal(err)
	}
	at1 := enforcedUsers(t, l, users)
	for _, u := range at1 {
		if !slices.Contains(at30, u) {
			t.Fatalf("%s enforced at 1%% but not at 30%%", u)
		}
	}
	if len(at1) > 12 {
		t.Fatalf("1%%: %d of 400 enforced", len(at1))
	}
}

// A rule without key is rolled out by the request's identity: each client
// is in or out, whatever rule bucket it shares.
func TestEnforcePercentWithoutKey(t *testing.T) {
	clk := clock.New(time.Time{})
	l := mustLimiter(t, newMemstore(t, memstore.WithClock(clk)), "rules:\n  - {name: global, rate: 1/1h, enforce_percent: 50}\n")
	r := func(i int) *floodgate.Request {
		return &floodgate.Request{Method: "/a.B/C", Identity: floodgate.Identity{IP: netip.AddrFrom4([4]byte{10, 0, byte(i >> 8), byte(i)})}}
	}
	admit(t, l, r(0)) // the one token
	var enforced, shadow int
	for i := range 200 {
		d := admit(t, l, r(i))
		switch {
		case !d.Allowed:
			enforced++
		case d.Shadow:
			shadow++
		default:
			t.Fatalf("client %d: %+v", i, d)
		}
		if d2 := admit(t, l, r(i)); d2.Allowed != d.Allowed {
			t.Fatalf("client %d decided differently twice: %+v then %+v", i, d, d2)
		}
	}
	if enforced < 70 || shadow < 70 {
		t.Fatalf("50%%: %d enforced, %d shadow of 200 clients", enforced, shadow)
	}
}

// Policy-wide shadow: every rule, and the deny list, decided and reported
// but never denying; a reload switches it on and off, keeping the buckets.
func TestShadowPolicyReload(t *testing.T) {
	clk := clock.New(time.Time{})
	s := newMemstore(t, memstore.WithClock(clk))
	const rules = `
deny: [203.0.113.0/24]
rules:
  - {name: per-user, key: [user], rate: 2/1h}
  - {name: per-ip, key: [ip], rate: 100/1h}
`
	l := mustLimiter(t, s, "shadow: true\n"+rules)
	r := &floodgate.Request{Method: "/a.B/C", Identity: floodgate.Identity{User: "u", IP: netip.MustParseAddr("192.0.2.1")}}
	for i := range 2 {
		if d := admit(t, l, r); !d.Allowed || d.Shadow || d.Policy != "" {
			t.Fatalf("shadow policy, request %d: %+v, want allowed, nothing to report", i, d)
		}
	}
	d := admit(t, l, r)
	if !d.Allowed || !d.Shadow || d.Policy != "per-user" || d.Remaining != 0 || d.RetryAfter != 0 {
		t.Fatalf("shadow policy, 3rd: %+v, want a shadow denial by per-user", d)
	}
	// The shadow denial charged nothing: per-ip is at 98.
	if got := remaining(t, s, l, r)["fg:{ip=192.0.2.1}:per-ip:token_bucket"]; got != 98 {
		t.Errorf("per-ip remaining %d, want 98", got)
	}
	listed := &floodgate.Request{Method: "/a.B/C", Identity: floodgate.Identity{IP: netip.MustParseAddr("203.0.113.9")}}
	if d := admit(t, l, listed); !d.Allowed || !d.Shadow || d.Policy != tiers.PolicyDeny {
		t.Fatalf("deny list under a shadow policy: %+v", d)
	}

	// Enforce: the same buckets now deny.
	if err := l.SetPolicy(mustLoad(t, rules)); err != nil {
		t.Fatal(err)
	}
	if d := admit(t, l, r); d.Allowed || d.Shadow || d.Policy != "per-user" || d.RetryAfter != 30*time.Minute {
		t.Fatalf("enforced: %+v, want a deny by per-user after 30m", d)
	}
	if d := admit(t, l, listed); d.Allowed || d.Policy != tiers.PolicyDeny {
		t.Fatalf("deny list enforced: %+v", d)
	}
	// And back.
	if err := l.SetPolicy(mustLoad(t, "shadow: true\n"+rules)); err != nil {
		t.Fatal(err)
	}
	if d := admit(t, l, r); !d.Allowed || !d.Shadow {
		t.Fatalf("shadow again: %+v", d)
	}
}

func TestRolloutLoadErrors(t *testing.T) {
	for _, tc := range []struct{ name, yaml, want string }{
		{"zero", "rules:\n  - {name: a, rate: 1/1s,\n     enforce_percent: 0}\n", "rules[0].enforce_percent: 0 enforces nothing: write shadow: true instead, at line 3"},
		{"above 100", "rules:\n  - {name: a, rate: 1/1s, enforce_percent: 101}\n", "rules[0].enforce_percent: 101 is out of range [1, 100], at line 2"},
		{"not an integer", "rules:\n  - {name: a, rate: 1/1s, enforce_percent: 50%}\n", `rules[0].enforce_percent: must be an integer percentage in [1, 100], got "50%", at line 2`},
		{"with shadow", "rules:\n  - {name: a, rate: 1/1s, enforce_percent: 50, shadow: true}\n", "rules[0].enforce_percent: a shadow rule enforces nothing: remove shadow or enforce_percent, at line 2"},
		{"shadow not a bool", "shadow: yes please\nrules: []\n", `shadow: must be true or false, got "yes please", at line 1`},
	} {
		if got := mustLoadErr(t, tc.yaml); got != tc.want {
			t.Errorf("%s:\n got: %s\nwant: %s", tc.name, got, tc.want)
		}
	}
	p := &tiers.Policy{Rules: []tiers.Rule{{Name: "a", Rate: tiers.Rate{N: 1, Period: time.Second}, EnforcePercent: -1}}}
	if err := p.Validate(); err == nil || err.Error() != "rules[0].enforce_percent: -1 is out of range [1, 100]" {
		t.Errorf("Validate = %v", err)
	}
}
