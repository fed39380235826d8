package tiers_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"log/slog"
	"net/netip"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/quota"
	"github.com/floodgate-go/floodgate/testing/clock"
	"github.com/floodgate-go/floodgate/tiers"
	"github.com/floodgate-go/floodgate/tiers/memstore"
)

// countingStore counts the Takes that reach the store behind it.
type countingStore struct {
	quota.Store
	takes atomic.Int64
}

func (s *countingStore) Take(ctx context.Context, b []quota.Bucket, r []quota.Result) (bool, error) {
	s.takes.Add(1)
	return s.Store.Take(ctx, b, r)
}

// fakeTimeStore is a memstore on a fake clock that never moves unless told:
// counts are exact whatever the machine's speed.
func fakeTimeStore(t testing.TB) (*countingStore, *clock.Fake) {
	clk := clock.New(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	return &countingStore{Store: newMemstore(t, memstore.WithClock(clk))}, clk
}

func ipReq(method, ip string) *floodgate.Request {
	return &floodgate.Request{Method: method, Identity: floodgate.Identity{IP: netip.MustParseAddr(ip)}}
}

// allowedOf sends the requests in order and counts the allowed ones.
func allowedOf(t *testing.T, l *tiers.Limiter, reqs []*floodgate.Request) int {
	t.Helper()
	n := 0
	for _, r := range reqs {
		d, _, err := l.Admit(context.Background(), r)
		if err != nil {
			t.Fatalf("Admit(%v): %v", r.Identity.IP, err)
		}
		if d.Allowed {
			n++
		}
	}
	return n
}

// inNet64 returns the i-th address of the /64 of base, spread over the
// interface identifier so no two share more than the prefix.
func inNet64(base string, i int) string {
	a := netip.MustParseAddr(base).As16()
	binary.BigEndian.PutUint64(a[8:], uint64(i+1)*0x9e3779b97f4a7c15)
	return netip.AddrFrom16(a).String()
}

const ipRulePolicy = `
rules:
  - {name: per-ip, key: [ip], rate: 5/1m, algorithm: sliding_window_log}
`

// TestIPv6SlashSixtyFourIsOneBucket: an IPv6 client rotating through 1000
// addresses of its /64 meets one bucket; another /64 has its own.
func TestIPv6SlashSixtyFourIsOneBucket(t *testing.T) {
	store, _ := fakeTimeStore(t)
	l := mustLimiter(t, store, ipRulePolicy)
	var reqs []*floodgate.Request
	keySet := map[string]bool{}
	for i := range 1000 {
		r := ipReq("/a.B/C", inNet64("2001:db8:aa:bb::", i))
		reqs = append(reqs, r)
		for _, b := range l.Buckets(nil, r) {
			keySet[b.Key] = true
		}
	}
	if len(keySet) != 1 || !keySet["fg:{ip=2001%3Adb8%3Aaa%3Abb%3A%3A%2F64}:per-ip:sliding_window_log"] {
		t.Fatalf("1000 addresses of one /64: keys %v, want the one of 2001:db8:aa:bb::/64", keySet)
	}
	if n := allowedOf(t, l, reqs); n != 5 {
		t.Errorf("1000 addresses of one /64: %d allowed, want the rule's 5", n)
	}
	// The neighbouring /64s are other clients.
	for _, base := range []string{"2001:db8:aa:bc::", "2001:db8:aa:ba::"} {
		reqs = reqs[:0]
		for i := range 10 {
			reqs = append(reqs, ipReq("/a.B/C", inNet64(base, i)))
		}
		if n := allowedOf(t, l, reqs); n != 5 {
			t.Errorf("%s/64: %d of 10 allowed, want 5 of its own", base, n)
		}
	}
	// IPv4 stays per address.
	if n := allowedOf(t, l, []*floodgate.Request{ipReq("/a.B/C", "192.0.2.1"), ipReq("/a.B/C", "192.0.2.2")}); n != 2 {
		t.Errorf("two IPv4 addresses: %d allowed, want 2", n)
	}
}

// TestMappedIPv4IsIPv4: ::ffff:a.b.c.d and a.b.c.d are one client: one
// key, one bucket, one override, one list entry.
func TestMappedIPv4IsIPv4(t *testing.T) {
	store, _ := fakeTimeStore(t)
	l := mustLimiter(t, store, ipRulePolicy)
	mapped, plain := ipReq("/a.B/C", "::ffff:192.0.2.7"), ipReq("/a.B/C", "192.0.2.7")
	km, kp := keys(l.Buckets(nil, mapped)), keys(l.Buckets(nil, plain))
	if len(km) != 1 || len(kp) != 1 || km[0] != kp[0] || km[0] != "fg:{ip=192.0.2.7}:per-ip:sliding_window_log" {
		t.Fatalf("keys: mapped %q, plain %q; want both fg:{ip=192.0.2.7}:...", km, kp)
	}
	// A zone never splits a client either.
	zoned := &floodgate.Request{Method: "/a.B/C", Identity: floodgate.Identity{IP: netip.MustParseAddr("fe80::1%eth0")}}
	if k := keys(l.Buckets(nil, zoned)); len(k) != 1 || k[0] != "fg:{ip=fe80%3A%3A%2F64}:per-ip:sliding_window_log" {
		t.Errorf("zoned address: keys %q", k)
	}
	var reqs []*floodgate.Request
	for i := range 10 {
		reqs = append(reqs, []*floodgate.Request{mapped, plain}[i%2])
	}
	if n := allowedOf(t, l, reqs); n != 5 {
		t.Errorf("alternating mapped and plain: %d of 10 allowed, want 5 (one bucket)", n)
	}
}

// TestIPPrefixPerRule: ipv4_prefix and ipv6_prefix set per rule.
func TestIPPrefixPerRule(t *testing.T) {
	l := mustLimiter(t, newMemstore(t), `
rules:
  - {name: v4net, key: [ip, user], rate: 1/1s, ipv4_prefix: 24, ipv6_prefix: 48}
  - {name: exact, key: [ip], rate: 1/1s, ipv6_prefix: 128}
  - {name: wide, key: [ip], rate: 1/1s, ipv4_prefix: 1, ipv6_prefix: 1}
`)
	for _, tc := range []struct {
		ip   string
		want []string
	}{
		{"192.0.2.77", []string{
			"fg:{ip=192.0.2.0%2F24}:v4net:user=bob:token_bucket",
			"fg:{ip=192.0.2.77}:exact:token_bucket",
			"fg:{ip=128.0.0.0%2F1}:wide:token_bucket",
		}},
		{"2001:db8:1:2:3:4:5:6", []string{
			"fg:{ip=2001%3Adb8%3A1%3A%3A%2F48}:v4net:user=bob:token_bucket",
			"fg:{ip=2001%3Adb8%3A1%3A2%3A3%3A4%3A5%3A6}:exact:token_bucket",
			"fg:{ip=%3A%3A%2F1}:wide:token_bucket",
		}},
	} {
		r := ipReq("/a.B/C", tc.ip)
		r.Identity.User = "bob"
		if got := keys(l.Buckets(nil, r)); strings.Join(got, " ") != strings.Join(tc.want, " ") {
			t.Errorf("%s: keys\n %q\nwant %q", tc.ip, got, tc.want)
		}
	}
	p := mustLoad(t, "rules:\n  - {name: r, key: [ip], rate: 1/1s, ipv4_prefix: 24, ipv6_prefix: 56}\n")
	if p.Rules[0].IPv4Prefix != 24 || p.Rules[0].IPv6Prefix != 56 {
		t.Errorf("loaded prefixes %d %d, want 24 56", p.Rules[0].IPv4Prefix, p.Rules[0].IPv6Prefix)
	}
}

// TestSpoofProofKeysFromPolicyNetworks: an override or list entry names a
// network, so it holds for every address of it, however the client
// rotates.
func TestAddressLists(t *testing.T) {
	store, _ := fakeTimeStore(t)
	l := mustLimiter(t, store, `
exempt:
  - 10.0.0.0/8
  - "2001:db8:e::/48"
  - ::ffff:198.51.100.9       # mapped: the IPv4 address
deny:
  - 203.0.113.0/24
  - 10.66.0.0/16              # inside the exempt 10/8: deny wins
  - 2001:db8:bad::1
rules:
  - {name: per-ip, key: [ip], rate: 2/1m}
  - {name: everyone, rate: 1000/1m}
`)
	ctx := context.Background()
	for _, ip := range []string{"10.1.2.3", "::ffff:10.9.9.9", "2001:db8:e:ffff::1", "198.51.100.9"} {
		before := store.takes.Load()
		for i := range 100 {
			d, done, err := l.Admit(ctx, ipReq("/a.B/C", ip))
			if err != nil || !d.Allowed || done != nil || d.Policy != tiers.PolicyExempt || d.Source != floodgate.SourcePolicy || d.Limit != 0 {
				t.Fatalf("exempt %s request %d: %+v, %v", ip, i, d, err)
			}
		}
		if n := store.takes.Load() - before; n != 0 {
			t.Errorf("exempt %s: %d store calls, want none", ip, n)
		}
		if b := l.Buckets(nil, ipReq("/a.B/C", ip)); len(b) != 0 {
			t.Errorf("exempt %s: Buckets %q, want none", ip, keys(b))
		}
	}
	for _, ip := range []string{"203.0.113.200", "::ffff:203.0.113.1", "10.66.1.1", "2001:db8:bad::1"} {
		before := store.takes.Load()
		d, done, err := l.Admit(ctx, ipReq("/a.B/C", ip))
		want := floodgate.Decision{Stage: floodgate.StageTiers, Source: floodgate.SourcePolicy, Policy: tiers.PolicyDeny, HideQuota: true}
		if err != nil || done != nil || d != want {
			t.Errorf("denied %s: %+v, %v; want %+v", ip, d, err, want)
		}
		if n := store.takes.Load() - before; n != 0 {
			t.Errorf("denied %s: %d store calls, want none", ip, n)
		}
	}
	// Neighbours of listed networks are limited as usual.
	for _, ip := range []string{"11.0.0.1", "203.0.114.1", "2001:db8:bad::2", "2001:db8:f::1"} {
		var reqs []*floodgate.Request
		for range 5 {
			reqs = append(reqs, ipReq("/a.B/C", ip))
		}
		if n := allowedOf(t, l, reqs); n != 2 {
			t.Errorf("unlisted %s: %d of 5 allowed, want 2", ip, n)
		}
	}
	// Requests without an address are not listed.
	if d, _, _ := l.Admit(ctx, &floodgate.Request{Method: "/a.B/C"}); !d.Allowed || d.Policy != "everyone" {
		t.Errorf("request without address: %+v", d)
	}
	// The same lists built in Go.
	gp := &tiers.Policy{
		Rules:  []tiers.Rule{{Name: "r", Key: []tiers.Scope{tiers.ScopeIP}, Rate: tiers.Rate{N: 1, Period: time.Second}}},
		Exempt: []netip.Prefix{netip.MustParsePrefix("::ffff:192.0.2.0/120")},
		Deny:   []netip.Prefix{netip.MustParsePrefix("192.0.2.128/25")},
	}
	gl, err := tiers.NewLimiter(newMemstore(t), gp)
	if err != nil {
		t.Fatal(err)
	}
	if d, _, _ := gl.Admit(ctx, ipReq("/x/Y", "192.0.2.1")); d.Policy != tiers.PolicyExempt {
		t.Errorf("Go policy, exempt 192.0.2.1: %+v", d)
	}
	if d, _, _ := gl.Admit(ctx, ipReq("/x/Y", "192.0.2.200")); d.Policy != tiers.PolicyDeny || d.Allowed {
		t.Errorf("Go policy, denied 192.0.2.200: %+v", d)
	}
}

// TestCIDROverrides: an override matched by network gives every client
// bucket inside it the override's rate; the longest prefix wins, and an
// override of one bucket beats every network.
func TestCIDROverrides(t *testing.T) {
	store, _ := fakeTimeStore(t)
	l := mustLimiter(t, store, `
rules:
  - {name: per-ip, key: [ip], rate: 2/1m, algorithm: sliding_window_log}
  - {name: per-ip-user, key: [user, ip], rate: 1/1m, algorithm: sliding_window_log}
overrides:
  - {rule: per-ip, key: {ip: 198.51.100.0/24}, rate: 10/1m}          # the office
  - {rule: per-ip, key: {ip: 198.51.100.128/25}, rate: 4/1m}         # its guest Wi-Fi
  - {rule: per-ip, key: {ip: 198.51.100.200}, rate: 3/1m}            # one address
  - {rule: per-ip, key: {ip: "2001:db8:0ff::/48"}, rate: 6/1m}       # an IPv6 office
  - {rule: per-ip, key: {ip: "2001:db8:1::/64"}, rate: 7/1m}         # one /64 bucket
  - {rule: per-ip-user, key: {user: ci, ip: 192.0.2.0/24}, rate: 8/1m}
`)
	count := func(ip, user string, n int) int {
		var reqs []*floodgate.Request
		for range n {
			r := ipReq("/a.B/C", ip)
			r.Identity.User = user
			reqs = append(reqs, r)
		}
		return allowedOf(t, l, reqs)
	}
	for _, tc := range []struct {
		ip   string
		want int
	}{
		{"198.51.100.1", 10},
		{"198.51.100.2", 10}, // each address its own bucket at the office rate
		{"198.51.100.129", 4},
		{"198.51.100.200", 3},
		{"198.51.101.1", 2},
		{"2001:db8:ff:1::1", 6},
		{"2001:db8:ff:2::1", 6},
		{"2001:db8:1::9", 7},
		{"2001:db8:2::9", 2},
	} {
		if got := count(tc.ip, "", 20); got != tc.want {
			t.Errorf("%s: %d of 20 allowed, want %d", tc.ip, got, tc.want)
		}
	}
	// Other scopes must match too: user ci in 192.0.2.0/24 gets 8 (and
	// the per-ip rule's 2 binds first), another user the rule's 1.
	if got := count("192.0.2.10", "ci", 20); got != 2 {
		t.Errorf("ci in 192.0.2.0/24: %d allowed, want 2 (per-ip binds)", got)
	}
	b := l.Buckets(nil, &floodgate.Request{Method: "/a.B/C", Identity: floodgate.Identity{User: "ci", IP: netip.MustParseAddr("192.0.2.11")}})
	if len(b) != 2 || b[0].Rule != "per-ip-user" || b[0].Limit.Rate != 8 {
		t.Errorf("ci in 192.0.2.0/24: buckets %+v, want per-ip-user at 8/1m", b)
	}
	b = l.Buckets(nil, &floodgate.Request{Method: "/a.B/C", Identity: floodgate.Identity{User: "eve", IP: netip.MustParseAddr("192.0.2.11")}})
	if len(b) != 2 || b[0].Rule != "per-ip-user" || b[0].Limit.Rate != 1 {
		t.Errorf("eve in 192.0.2.0/24: buckets %+v, want per-ip-user at the rule's 1/1m", b)
	}
}

// TestNetworkLoadErrors: every bad network is reported with its field and
// line.
func TestNetworkLoadErrors(t *testing.T) {
	cases := []struct{ name, yaml, want string }{
		{"exempt not a CIDR", "exempt: [10.0.0.0/8, 10.0.0.300]\nrules: []\n",
			`exempt[1]: "10.0.0.300" is not an IP address or CIDR, at line 1`},
		{"exempt host bits", "exempt:\n  - 10.0.0.1/8\nrules: []\n",
			`exempt[0]: 10.0.0.1/8 has bits set past /8: write 10.0.0.0/8, at line 2`},
		{"deny bad length", "rules: []\ndeny:\n  - 192.0.2.0/33\n",
			`deny[0]: "192.0.2.0/33" is not an IP address or CIDR, at line 3`},
		{"deny zone", "rules: []\ndeny: [\"fe80::1%eth0\"]\n",
			`deny[0]: "fe80::1%eth0" is not an IP address or CIDR, at line 2`},
		{"deny mapped host bits", "rules: []\ndeny: [\"::ffff:10.1.0.0/104\"]\n",
			`deny[0]: ::ffff:10.1.0.0/104 has bits set past /104: write ::ffff:10.0.0.0/104, at line 2`},
		{"deny not a list", "rules: []\ndeny: 10.0.0.0/8\n",
			`deny: must be a list of CIDRs or addresses, got "10.0.0.0/8", at line 2`},
		{"deny number", "rules: []\ndeny: [7]\n", ""},
		{"override not a CIDR", "rules:\n  - {name: r, key: [ip], rate: 1/1s}\noverrides:\n  - {rule: r, key: {ip: 10.0.0.0/99}, rate: 2/1s}\n",
			`overrides[0].key.ip: "10.0.0.0/99" is not an IP address or CIDR, at line 4`},
		{"override host bits", "rules:\n  - {name: r, key: [ip], rate: 1/1s}\noverrides:\n  - {rule: r, key: {ip: 10.1.0.0/8}, rate: 2/1s}\n",
			`overrides[0].key.ip: 10.1.0.0/8 has bits set past /8: write 10.0.0.0/8, at line 4`},
		{"override narrower than bucket", "rules:\n  - {name: r, key: [ip], rate: 1/1s}\noverrides:\n  - {rule: r, key: {ip: \"2001:db8::5\"}, rate: 2/1s}\n",
			`overrides[0].key.ip: 2001:db8::5 is narrower than rule "r"'s buckets (ipv6_prefix 64): every address of one /64 shares one bucket and one limit; name 2001:db8::/64 or a wider network, at line 4`},
		{"override narrower v4", "rules:\n  - {name: r, key: [ip], rate: 1/1s, ipv4_prefix: 24}\noverrides:\n  - {rule: r, key: {ip: 10.0.0.5}, rate: 2/1s}\n",
			`overrides[0].key.ip: 10.0.0.5 is narrower than rule "r"'s buckets (ipv4_prefix 24): every address of one /24 shares one bucket and one limit; name 10.0.0.0/24 or a wider network, at line 4`},
		{"override duplicate network", "rules:\n  - {name: r, key: [ip], rate: 1/1s}\noverrides:\n  - {rule: r, key: {ip: 10.0.0.0/8}, rate: 2/1s}\n  - {rule: r, key: {ip: \"::ffff:10.0.0.0/104\"}, rate: 3/1s}\n",
			`overrides[1].key: rule "r" already has an override for this key, at line 5`},
		{"prefix out of range", "rules:\n  - name: r\n    key: [ip]\n    rate: 1/1s\n    ipv4_prefix: 33\n    ipv6_prefix: 129\n",
			"rules[0].ipv4_prefix: 33 is out of range [1, 32], at line 5\nrules[0].ipv6_prefix: 129 is out of range [1, 128], at line 6"},
		{"prefix zero", "rules:\n  - {name: r, key: [ip], rate: 1/1s, ipv6_prefix: 0}\n",
			"rules[0].ipv6_prefix: 0 must be at least 1, at line 2"},
		{"prefix without ip", "rules:\n  - name: r\n    key: [user]\n    rate: 1/1s\n    ipv6_prefix: 56\n",
			"rules[0].ipv6_prefix: is only for rules whose key has ip (the key is [user]), at line 5"},
		{"reserved name", "rules:\n  - {name: deny, rate: 1/1s}\n  - {name: exempt, rate: 1/1s}\n",
			"rules[0].name: \"deny\" is reserved: it names the decisions of the policy's deny list, at line 2\nrules[1].name: \"exempt\" is reserved: it names the decisions of the policy's exempt list, at line 3"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := tiers.Load([]byte(tc.yaml))
			var pe *tiers.PolicyError
			if !errors.As(err, &pe) {
				t.Fatalf("Load = %v, want a *PolicyError", err)
			}
			if tc.want == "" {
				t.Logf("%v", err)
				if pe.Errs[0].Line == 0 {
					t.Errorf("error without a line: %v", err)
				}
				return
			}
			if err.Error() != tc.want {
				t.Errorf("Load error:\n got: %s\nwant: %s", err, tc.want)
			}
		})
	}
	// Go-built policies are checked the same way, without lines.
	bad := &tiers.Policy{Rules: []tiers.Rule{}, Exempt: []netip.Prefix{netip.MustParsePrefix("10.0.0.1/8"), {}}}
	if err := bad.Validate(); err == nil || err.Error() != "exempt[0]: 10.0.0.1/8 has bits set past /8: write 10.0.0.0/8\nexempt[1]: is not a valid CIDR" {
		t.Errorf("Validate = %v", err)
	}
}

// TestSkippedRules: a rule whose key the request cannot fill is named in
// Decision.Skipped, allowed or denied, without allocating for the names.
func TestSkippedRules(t *testing.T) {
	store, _ := fakeTimeStore(t)
	l := mustLimiter(t, store, `
rules:
  - {name: user-tenant, key: [user, tenant], rate: 1/1m}
  - {name: per-user, key: [user], rate: 1/1m}
  - {name: per-ip, key: [ip], rate: 2/1m}
  - {name: other-method, match: {method: /x.Y/Z}, key: [user], rate: 1/1m}
`)
	ctx := context.Background()
	anon := ipReq("/a.B/C", "192.0.2.1")
	for i, want := range []bool{true, true, false} {
		d, _, err := l.Admit(ctx, anon)
		if err != nil || d.Allowed != want || d.Skipped != "user-tenant,per-user" {
			t.Errorf("anonymous request %d: %+v, %v; want Allowed %v, Skipped user-tenant,per-user", i, d, err, want)
		}
	}
	r := ipReq("/a.B/C", "192.0.2.2")
	r.Identity.User = "bob"
	if d, _, _ := l.Admit(ctx, r); !d.Allowed || d.Skipped != "user-tenant" {
		t.Errorf("user without tenant: %+v, want Skipped user-tenant", d)
	}
	r.Identity.Tenant = "acme"
	if d, _, _ := l.Admit(ctx, r); d.Allowed || d.Skipped != "" {
		t.Errorf("full identity, second request: %+v, want denied, nothing skipped", d)
	}
	none := &floodgate.Request{Method: "/x.Y/Z"}
	if d, _, _ := l.Admit(ctx, none); !d.Allowed || d.Policy != "" || d.Skipped != "user-tenant,per-user,per-ip,other-method" {
		t.Errorf("no identity at all: %+v", d)
	}
	if raceEnabled {
		return
	}
	if n := testing.AllocsPerRun(100, func() {
		d, _, _ := l.Admit(ctx, none)
		if d.Skipped == "" {
			t.Fatal("no rule skipped")
		}
	}); n != 0 {
		t.Errorf("Admit skipping 4 rules allocates %.1f times, want 0", n)
	}
}

// captureLog sends slog's default logger to a buffer for the test.
func captureLog(t *testing.T) *bytes.Buffer {
	var buf bytes.Buffer
	prev := slog.Default()
	slog.SetDefault(slog.New(slog.NewTextHandler(&buf, nil)))
	t.Cleanup(func() { slog.SetDefault(prev) })
	return &buf
}

// TestRequireScopes: a rule keyed on a scope the transport never fills is
// warned about once per rule, or refused when strict, at start and on
// every reload.
func TestRequireScopes(t *testing.T) {
	const policy = `
rules:
  - {name: login-user, match: {method: /auth.v1.Auth/Login}, key: [user], rate: 3/10s}
  - {name: http-tenant, match: {method: "POST /v1/pay"}, key: [tenant], rate: 3/10s}
  - {name: both, key: [ip, api_key], rate: 3/10s}
  - {name: per-ip, key: [ip], rate: 3/10s}
`
	logs := captureLog(t)
	l := mustLimiter(t, newMemstore(t), policy)
	if err := l.RequireScopes(tiers.TransportGRPC, []string{"endpoint", "ip"}, false); err != nil {
		t.Fatal(err)
	}
	out := logs.String()
	for _, want := range []string{"rule=login-user scope=user transport=grpc", "rule=both scope=api_key transport=grpc"} {
		if strings.Count(out, want) != 1 {
			t.Errorf("log lacks one %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "http-tenant") || strings.Contains(out, "per-ip") || strings.Count(out, "level=WARN") != 2 {
		t.Errorf("log warns of a rule the gRPC transport fills or never sees:\n%s", out)
	}
	// Unary and stream interceptors declare the same thing: no new line.
	// A reload warns only of a rule not warned of before.
	logs.Reset()
	if err := l.RequireScopes(tiers.TransportGRPC, []string{"ip", "endpoint"}, false); err != nil {
		t.Fatal(err)
	}
	if err := l.SetPolicy(mustLoad(t, policy+"  - {name: per-tenant, key: [tenant], rate: 3/10s}\n")); err != nil {
		t.Fatal(err)
	}
	if out := logs.String(); strings.Count(out, "level=WARN") != 1 || !strings.Contains(out, "rule=per-tenant scope=tenant") {
		t.Errorf("after a reload, log:\n%s\nwant one warning, for per-tenant", out)
	}
	// The requests say it too.
	d, _, _ := l.Admit(context.Background(), ipReq("/auth.v1.Auth/Login", "192.0.2.1"))
	if d.Skipped != "both,login-user,per-tenant" {
		t.Errorf("Skipped = %q", d.Skipped)
	}

	// Strict: an error naming each rule, nothing declared; and a later
	// policy with such a rule is refused, the one in force staying.
	strict := mustLimiter(t, newMemstore(t), policy)
	err := strict.RequireScopes(tiers.TransportHTTP, []string{"endpoint", "ip", "user"}, true)
	want := `tiers: rule "both" (rules[2], line 5) is keyed on api_key, which the http transport never fills (give it a source: the policy file's identity: api_key:, or interceptor.WithAPIKey, or say when_missing: skip or deny on the rule): it would apply to no request` + "\n" +
		`tiers: rule "http-tenant" (rules[1], line 4) is keyed on tenant, which the http transport never fills (give it a source: the policy file's identity: tenant:, or interceptor.WithTenant, or say when_missing: skip or deny on the rule): it would apply to no request`
	if err == nil || err.Error() != want {
		t.Fatalf("strict RequireScopes:\n got %v\nwant %s", err, want)
	}
	ok := mustLoad(t, "rules:\n  - {name: per-ip, key: [ip], rate: 3/10s}\n")
	if err := strict.SetPolicy(ok); err != nil {
		t.Fatal(err)
	}
	if err := strict.RequireScopes(tiers.TransportHTTP, []string{"endpoint", "ip"}, true); err != nil {
		t.Fatal(err)
	}
	err = strict.SetPolicy(mustLoad(t, policy))
	if err == nil || !strings.Contains(err.Error(), `rule "http-tenant"`) || strict.Policy() != ok {
		t.Errorf("strict SetPolicy with an unresolvable rule: %v; policy in force changed: %v", err, strict.Policy() != ok)
	}

	// Bad declarations.
	if err := l.RequireScopes("smtp", nil, false); err == nil || !strings.Contains(err.Error(), `unknown transport "smtp"`) {
		t.Errorf("unknown transport: %v", err)
	}
	if err := l.RequireScopes("", []string{"usr"}, false); err == nil || !strings.Contains(err.Error(), `unknown scope "usr"`) {
		t.Errorf("unknown scope: %v", err)
	}
}

// FuzzIPKey: two addresses share a key exactly when they are in one
// bucket network (/32 or /64, mapped IPv4 as IPv4), and a key names only
// that network.
func FuzzIPKey(f *testing.F) {
	f.Add([]byte{10, 0, 0, 1}, []byte{0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 10, 0, 0, 1})
	f.Add(netip.MustParseAddr("2001:db8::1").AsSlice(), netip.MustParseAddr("2001:db8::ffff:1").AsSlice())
	f.Add(netip.MustParseAddr("2001:db8::1").AsSlice(), netip.MustParseAddr("2001:db8:0:1::1").AsSlice())
	f.Add([]byte{192, 0, 2, 1}, []byte{192, 0, 2, 2})
	l := mustLimiter(f, newMemstore(f), `
rules:
  - {name: ip, key: [ip], rate: 1/1s}
  - {name: ip-user, key: [user, ip], rate: 1/1s}
`)
	key := func(t *testing.T, a netip.Addr) (string, string) {
		bs := l.Buckets(nil, &floodgate.Request{Method: "/m", Identity: floodgate.Identity{IP: a, User: "u"}})
		if len(bs) != 2 {
			t.Fatalf("%v: %d buckets, want 2", a, len(bs))
		}
		return bs[0].Key, bs[1].Key
	}
	f.Fuzz(func(t *testing.T, x, y []byte) {
		a, b := fuzzAddr(x), fuzzAddr(y)
		if !a.IsValid() || !b.IsValid() {
			return
		}
		ua, ia := key(t, a)
		ub, ib := key(t, b)
		same := bucketNet(a) == bucketNet(b)
		if (ia == ib) != same || (ua == ub) != same {
			t.Fatalf("%v and %v (networks %v, %v): keys %q %q, %q %q", a, b, bucketNet(a), bucketNet(b), ia, ib, ua, ub)
		}
		net := bucketNet(a)
		text := net.Addr().String()
		if net.Bits() != net.Addr().BitLen() {
			text = net.String()
		}
		if want := "fg:{ip=" + refEscape(text) + "}:ip:token_bucket"; ia != want {
			t.Fatalf("%v: key %q, want %q", a, ia, want)
		}
	})
}
