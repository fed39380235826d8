package tiers_test

import (
	"net/netip"
	"strings"
	"testing"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/tiers"
	"github.com/floodgate-go/floodgate/tiers/memstore"
)

func principalLimiter(t *testing.T) *tiers.Limiter {
	t.Helper()
	store, err := memstore.New()
	if err != nil {
		t.Fatal(err)
	}
	l, err := tiers.NewLimiter(store, mustLoad(t, `
deny: [192.0.2.0/24]
rules:
  - {name: login, key: [ip, user], rate: 5/1m}
  - {name: net, key: [ip], rate: 5/1m, ipv6_prefix: 48}
  - {name: keys, key: [api_key], rate: 5/1m}
  - {name: region, key: [tenant, "header:x-region"], rate: 5/1m}
  - {name: route, key: [endpoint], rate: 5/1m}
  - {name: win, key: [user], rate: [5/1m, 100/1h]}
  - {name: strict, key: [user], rate: 5/1m, when_missing: deny}
  - {name: global, rate: 5/1m}
`))
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func TestAppendPrincipal(t *testing.T) {
	t.Parallel()
	l := principalLimiter(t)
	long := strings.Repeat("u", 65)
	for _, tc := range []struct {
		policy string
		r      floodgate.Request
		want   string
	}{
		{"login", floodgate.Request{Identity: floodgate.Identity{User: "admin", IP: netip.MustParseAddr("203.0.113.66")}}, "ip=203.0.113.66 user=admin"},
		{"login", floodgate.Request{Identity: floodgate.Identity{User: "a b=c%d\n", IP: netip.MustParseAddr("::ffff:203.0.113.66")}}, "ip=203.0.113.66 user=a%20b%3Dc%25d%0A"},
		{"net", floodgate.Request{Identity: floodgate.Identity{IP: netip.MustParseAddr("2001:db8:1:2::7")}}, "ip=2001:db8:1::/48"},
		{"region", floodgate.Request{Identity: floodgate.Identity{Tenant: "acme"}, Headers: []floodgate.Header{{Name: "x-region", Value: "eu"}}}, "tenant=acme header:x-region=eu"},
		{"route", floodgate.Request{Method: "GET /v1/items/{id}"}, "endpoint=GET%20/v1/items/{id}"},
		{"win/1h", floodgate.Request{Identity: floodgate.Identity{User: "bob"}}, "user=bob"},
		{"strict", floodgate.Request{}, "user="},
		{"global", floodgate.Request{Identity: floodgate.Identity{User: "bob"}}, "*"},
		{tiers.PolicyDeny, floodgate.Request{Identity: floodgate.Identity{IP: netip.MustParseAddr("192.0.2.9")}}, "ip=192.0.2.9"},
		{"win", floodgate.Request{Identity: floodgate.Identity{User: long}}, "user=" + strings.TrimPrefix(keyOf(t, l, "win", &floodgate.Request{Identity: floodgate.Identity{User: long}}), "fg:{user=")[:33]},
	} {
		got, ok := l.AppendPrincipal([]byte("x:"), tc.policy, &tc.r)
		if !ok || string(got) != "x:"+tc.want {
			t.Errorf("AppendPrincipal(%q, %+v) = %q, %v; want %q, true", tc.policy, tc.r, got, ok, "x:"+tc.want)
		}
	}
	if got, ok := l.AppendPrincipal(nil, "nosuchrule", &floodgate.Request{}); ok || len(got) != 0 {
		t.Errorf("AppendPrincipal(nosuchrule) = %q, %v; want nothing, false", got, ok)
	}
}

// TestAppendPrincipalAPIKey: an API key is written as its bucket's key
// has it, hashed, never raw.
func TestAppendPrincipalAPIKey(t *testing.T) {
	t.Parallel()
	l := principalLimiter(t)
	r := &floodgate.Request{Identity: floodgate.Identity{APIKey: "sk_live_secret"}}
	got, ok := l.AppendPrincipal(nil, "keys", r)
	key := keyOf(t, l, "keys", r) // fg:{api_key=#<hex>}:keys:token_bucket
	want := "api_key=" + strings.TrimPrefix(key[:strings.IndexByte(key, '}')], "fg:{api_key=")
	if !ok || string(got) != want || strings.Contains(string(got), "secret") || len(got) != len("api_key=#")+32 {
		t.Errorf("AppendPrincipal(keys) = %q, %v; want %q (the bucket's %s)", got, ok, want, key)
	}
}

// keyOf is the key of the bucket of rule for r.
func keyOf(t *testing.T, l *tiers.Limiter, rule string, r *floodgate.Request) string {
	t.Helper()
	for _, b := range l.Buckets(nil, r) {
		if strings.Contains(b.Key, "}:"+rule+":") {
			return b.Key
		}
	}
	t.Fatalf("no bucket of rule %s for %+v", rule, r)
	return ""
}

func TestAppendPrincipalDoesNotAllocate(t *testing.T) {
	if raceEnabled {
		t.Skip("sync.Pool under the race detector")
	}
	l := principalLimiter(t)
	r := &floodgate.Request{Identity: floodgate.Identity{User: "admin", APIKey: "k", IP: netip.MustParseAddr("203.0.113.66")}}
	buf := make([]byte, 0, 128)
	for _, policy := range []string{"login", "keys", "win/1h"} {
		if n := testing.AllocsPerRun(100, func() { buf, _ = l.AppendPrincipal(buf[:0], policy, r) }); n != 0 {
			t.Errorf("AppendPrincipal(%s): %.1f allocations, want 0", policy, n)
		}
	}
}
