package tiers_test

import (
	"errors"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/quota"
	"github.com/floodgate-go/floodgate/testing/clock"
	"github.com/floodgate-go/floodgate/testing/redistest"
	"github.com/floodgate-go/floodgate/tiers"
	"github.com/floodgate-go/floodgate/tiers/memstore"
	"github.com/floodgate-go/floodgate/tiers/redisstore"
)

const inspectPolicy = `
rules:
  - name: login
    match: {method: /auth.v1.Auth/Login}
    key: [ip, user]
    rate: 5/1m
    algorithm: sliding_window_log
  - {name: per-user, key: [user], rate: 10/1m, burst: 10}
  - {name: per-tenant, key: [tenant], rate: [100/1h, 1000/24h], algorithm: fixed_window}
  - {name: shadow-ip, key: [ip], rate: 3/1m, algorithm: fixed_window, shadow: true}
`

// state is one BucketState in a comparable short form: rule, period and
// remaining.
func state(b tiers.BucketState) string {
	s := b.Rule + "/" + b.Limit.Period.String() + "=" + itoa(b.Remaining)
	if b.Shadow {
		s += " shadow"
	}
	return s
}

func itoa(n int64) string {
	if n < 0 {
		return "-" + itoa(-n)
	}
	if n < 10 {
		return string(rune('0' + n))
	}
	return itoa(n/10) + string(rune('0'+n%10))
}

func states(bs []tiers.BucketState) string {
	var out []string
	for _, b := range bs {
		out = append(out, state(b))
	}
	return strings.Join(out, " ")
}

// testInspectReset takes known requests and checks what Inspect reads
// (twice: reading charges nothing), what Reset of one rule and of all
// restores, and the refusals.
func testInspectReset(t *testing.T, s quota.Store, clk *clock.Fake) {
	l := mustLimiter(t, s, inspectPolicy)
	ip := netip.MustParseAddr("203.0.113.7")
	login := &floodgate.Request{Method: "/auth.v1.Auth/Login", Identity: floodgate.Identity{User: "alice", Tenant: "acme", IP: ip}}
	other := &floodgate.Request{Method: "/shop.v1.Shop/Buy", Identity: floodgate.Identity{User: "alice", Tenant: "acme", IP: ip}}
	for range 3 {
		if d, _, err := l.Admit(t.Context(), login); !d.Allowed || err != nil {
			t.Fatalf("login: %+v %v", d, err)
		}
	}
	for range 4 {
		if d, _, err := l.Admit(t.Context(), other); !d.Allowed || err != nil {
			t.Fatalf("other: %+v %v", d, err)
		}
	}
	want := "login/1m0s=2 per-user/1m0s=3 per-tenant/1h0m0s=93 per-tenant/24h0m0s=993 shadow-ip/1m0s=0 shadow"
	for range 2 { // the second read sees the same: reading charges nothing
		got, err := l.Inspect(t.Context(), login)
		if err != nil {
			t.Fatal(err)
		}
		if states(got) != want {
			t.Fatalf("Inspect:\n got %s\nwant %s", states(got), want)
		}
		if got[1].Key != "fg:{user=alice}:per-user:token_bucket" || got[1].Source != floodgate.SourceStore || got[1].Cost != 1 ||
			got[1].Reset != 7*6*time.Second {
			t.Fatalf("per-user bucket: %+v", got[1])
		}
	}
	// Without the method, the login rule does not apply.
	noMethod := &floodgate.Request{Identity: login.Identity}
	if got, err := l.Inspect(t.Context(), noMethod); err != nil || states(got) != "per-user/1m0s=3 per-tenant/1h0m0s=93 per-tenant/24h0m0s=993 shadow-ip/1m0s=0 shadow" {
		t.Fatalf("Inspect without method: %s, %v", states(got), err)
	}

	reset, err := l.Reset(t.Context(), login, "per-user", "login")
	if err != nil {
		t.Fatal(err)
	}
	if states(reset) != "login/1m0s=5 per-user/1m0s=10" {
		t.Fatalf("Reset returned %s", states(reset))
	}
	if got, _ := l.Inspect(t.Context(), login); states(got) != "login/1m0s=5 per-user/1m0s=10 per-tenant/1h0m0s=93 per-tenant/24h0m0s=993 shadow-ip/1m0s=0 shadow" {
		t.Fatalf("after Reset of two rules: %s", states(got))
	}
	clk.Advance(time.Second)
	if _, err := l.Reset(t.Context(), login); err != nil {
		t.Fatal(err)
	}
	if got, _ := l.Inspect(t.Context(), login); states(got) != "login/1m0s=5 per-user/1m0s=10 per-tenant/1h0m0s=100 per-tenant/24h0m0s=1000 shadow-ip/1m0s=3 shadow" {
		t.Fatalf("after Reset of all: %s", states(got))
	}
	// Full capacity is really there: 10 admitted in a row, the 11th denied.
	for i := range 11 {
		d, _, _ := l.Admit(t.Context(), other)
		if d.Allowed != (i < 10) {
			t.Fatalf("request %d after reset: allowed %v", i+1, d.Allowed)
		}
	}

	// Refusals: an identity no rule applies to, a rule that does not
	// apply, an exempt address.
	_, err = l.Inspect(t.Context(), &floodgate.Request{Method: "/x.Y/Z"})
	if want := "tiers: no rule applies to method=/x.Y/Z (rules per-user, per-tenant, shadow-ip match but are keyed on an identity component it lacks)"; !errors.Is(err, tiers.ErrNoRule) || err.Error() != want {
		t.Fatalf("empty identity: %v", err)
	}
	exempt := mustLimiter(t, s, "exempt: [203.0.113.0/24]\n"+inspectPolicy)
	if _, err := exempt.Inspect(t.Context(), login); !errors.Is(err, tiers.ErrNoRule) || !strings.Contains(err.Error(), "is in the policy's exempt list") {
		t.Fatalf("exempt address: %v", err)
	}
	_, err = l.Reset(t.Context(), noMethod, "login", "nope")
	if !errors.Is(err, tiers.ErrNoRule) || err.Error() != `tiers: no rule applies: rules "login", "nope" to user=alice tenant=acme ip=203.0.113.7` {
		t.Fatalf("Reset of rules that do not apply: %v", err)
	}
}

func TestInspectResetMemstore(t *testing.T) {
	clk := clock.New(time.Unix(1_800_000_000, 0))
	s, err := memstore.New(memstore.WithClock(clk))
	if err != nil {
		t.Fatal(err)
	}
	testInspectReset(t, s, clk)
}

func TestInspectResetRedis(t *testing.T) {
	srv := redistest.Start(t)
	clk := clock.New(time.Unix(1_800_000_000, 0))
	s, err := redisstore.New(srv.Client(), redisstore.WithClock(clk))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	testInspectReset(t, s, clk)
	// Reset deleted the keys; what is in Redis now is only what the
	// requests after it wrote.
	n, err := srv.Client().Exists(t.Context(), "fg:{user=alice}:per-user:token_bucket").Result()
	if err != nil || n != 1 {
		t.Fatalf("EXISTS per-user = %d, %v", n, err)
	}
}

// A store that cannot reset is refused by name.
func TestResetNeedsResetter(t *testing.T) {
	l := mustLimiter(t, takeOnlyStore{newMemstore(t)}, inspectPolicy)
	_, err := l.Reset(t.Context(), &floodgate.Request{Identity: floodgate.Identity{User: "a"}})
	if err == nil || !strings.Contains(err.Error(), "cannot reset") {
		t.Fatalf("Reset over a plain store: %v", err)
	}
}

// On a Redis Cluster, the buckets of one caller live in several slots
// (user, tenant, ip tags): Inspect reads them all and Reset deletes them
// all, one pipeline split by slot.
func TestInspectResetRedisCluster(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a Redis Cluster")
	}
	cl := redistest.StartCluster(t)
	clk := clock.New(time.Unix(1_800_000_000, 0))
	s, err := redisstore.New(cl.Client(), redisstore.WithClock(clk))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	testInspectReset(t, s, clk)
}

// A denial the Redis store cached for a bucket (cache_denials) does not
// outlive a Reset of the bucket through that store.
func TestResetDropsCachedDenial(t *testing.T) {
	srv := redistest.Start(t)
	clk := clock.New(time.Unix(1_800_000_000, 0))
	s, err := redisstore.New(srv.Client(), redisstore.WithClock(clk))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	l := mustLimiter(t, s, "rules:\n  - {name: u, key: [user], rate: 2/1h, algorithm: fixed_window, cache_denials: true}\n")
	r := &floodgate.Request{Identity: floodgate.Identity{User: "bob"}}
	for i := range 3 {
		if d, _, _ := l.Admit(t.Context(), r); d.Allowed != (i < 2) {
			t.Fatalf("request %d: allowed %v", i+1, d.Allowed)
		}
	}
	if d, _, _ := l.Admit(t.Context(), r); d.Allowed || d.Source != floodgate.SourceCache {
		t.Fatalf("4th request: %+v, want denied from the cache", d)
	}
	if _, err := l.Reset(t.Context(), r); err != nil {
		t.Fatal(err)
	}
	if d, _, _ := l.Admit(t.Context(), r); !d.Allowed || d.Remaining != 1 {
		t.Fatalf("after Reset: %+v, want admitted with 1 left", d)
	}
}
