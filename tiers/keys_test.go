package tiers_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"net/netip"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/quota"
	"github.com/floodgate-go/floodgate/tiers"
)

func mustLoad(t testing.TB, y string) *tiers.Policy {
	t.Helper()
	p, err := tiers.Load([]byte(y))
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	return p
}

func mustLimiter(t testing.TB, s quota.Store, y string, opts ...tiers.Option) *tiers.Limiter {
	t.Helper()
	l, err := tiers.NewLimiter(s, mustLoad(t, y), opts...)
	if err != nil {
		t.Fatalf("NewLimiter: %v", err)
	}
	return l
}

func designLimiter(t testing.TB, opts ...tiers.Option) *tiers.Limiter {
	t.Helper()
	p, err := loadFile("testdata/policy.yaml")
	if err != nil {
		t.Fatal(err)
	}
	l, err := tiers.NewLimiter(newMemstore(t), p, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func keys(bs []quota.Bucket) []string {
	out := make([]string, len(bs))
	for i, b := range bs {
		out[i] = b.Key
	}
	return out
}

func TestResolveDesignPolicy(t *testing.T) {
	l := designLimiter(t)
	r := &floodgate.Request{
		Method:   "/auth.v1.Auth/Login",
		Identity: floodgate.Identity{User: "bob", Tenant: "acme", APIKey: "k", IP: netip.MustParseAddr("10.0.0.1")},
		Tier:     "pro",
	}
	got := l.Buckets(nil, r)
	want := []quota.Bucket{
		// Two scopes first, then policy order.
		{Key: "fg:{ip=10.0.0.1}:login-ip-user:user=bob:sliding_window_log", Limit: quota.Limit{Algorithm: quota.SlidingWindowLog, Rate: 5, Period: time.Minute}, Cost: 1, Rule: "login-ip-user", OnStoreError: quota.FailClosed},
		{Key: "fg:{ip=10.0.0.1}:login-ip:token_bucket", Limit: quota.Limit{Rate: 20, Period: time.Minute, Burst: 20}, Cost: 1, Rule: "login-ip"},
		// acme has an override: 20000/1h, burst defaults to the rate.
		{Key: "fg:{tenant=acme}:tenant-plan:token_bucket", Limit: quota.Limit{Rate: 20000, Period: time.Hour, Burst: 20000}, Cost: 1, Rule: "tenant-plan"},
		{Key: "fg:{ip=10.0.0.1}:ip-safety-net:token_bucket", Limit: quota.Limit{Rate: 1000, Period: time.Minute, Burst: 1000}, Cost: 1, Rule: "ip-safety-net"},
	}
	if len(got) != len(want) {
		t.Fatalf("Buckets = %q, want %q", keys(got), keys(want))
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("bucket %d = %+v\nwant        %+v", i, got[i], want[i])
		}
	}

	// Tiers: pro, unknown -> default (free), empty -> default; a method
	// glob rule with its own cost; user escaping.
	r = &floodgate.Request{Method: "/search.v1.Search/Query", Cost: 3,
		Identity: floodgate.Identity{User: "a:b{c}", Tenant: "globex", IP: netip.MustParseAddr("::1")}, Tier: "pro"}
	got = l.Buckets(nil, r)
	wantKeys := []string{
		"fg:{user=a%3Ab%7Bc%7D}:search:token_bucket",
		"fg:{tenant=globex}:tenant-plan:token_bucket",
		"fg:{ip=%3A%3A%2F64}:ip-safety-net:token_bucket", // ::1 is keyed on its /64, ::/64
	}
	if strings.Join(keys(got), " ") != strings.Join(wantKeys, " ") {
		t.Fatalf("Buckets = %q, want %q", keys(got), wantKeys)
	}
	if got[0].Cost != 10 || got[1].Cost != 3 || got[2].Cost != 3 {
		t.Errorf("costs = %d %d %d, want 10 (the rule's) 3 3 (the request's)", got[0].Cost, got[1].Cost, got[2].Cost)
	}
	if got[1].Limit != (quota.Limit{Rate: 5000, Period: time.Hour, Burst: 100}) {
		t.Errorf("pro tier limit = %+v", got[1].Limit)
	}
	for _, tier := range []string{"", "platinum"} {
		r.Tier = tier
		got = l.Buckets(nil, r)
		if got[1].Limit != (quota.Limit{Rate: 100, Period: time.Hour, Burst: 10}) {
			t.Errorf("Tier %q: limit = %+v, want the default tier free", tier, got[1].Limit)
		}
	}

	// Missing identity components: rules keyed on them do not apply.
	got = l.Buckets(nil, &floodgate.Request{Method: "/search.v1.Search/Query"})
	if len(got) != 0 {
		t.Errorf("anonymous request without IP: Buckets = %q, want none", keys(got))
	}
}

func TestKeyHashing(t *testing.T) {
	l := mustLimiter(t, newMemstore(t), `
rules:
  - {name: u, key: [user], rate: 1/1s}
  - {name: k, key: [api_key, endpoint], rate: 1/1s}
  - {name: global, rate: 1/1s}
`)
	h := func(s string) string {
		sum := sha256.Sum256([]byte(s))
		return "#" + hex.EncodeToString(sum[:16])
	}
	long := strings.Repeat("x", 65)
	edge := strings.Repeat("y", 64)
	cases := []struct {
		id   floodgate.Identity
		want []string
	}{
		{floodgate.Identity{User: long, APIKey: "secret"}, []string{
			"fg:{api_key=" + h("secret") + "}:k:endpoint=%2Fa.B%2FC:token_bucket",
			"fg:{user=" + h(long) + "}:u:token_bucket",
			"fg:{global}:token_bucket",
		}},
		{floodgate.Identity{User: edge}, []string{
			"fg:{user=" + edge + "}:u:token_bucket",
			"fg:{global}:token_bucket",
		}},
		{floodgate.Identity{User: "é\n\xff"}, []string{
			"fg:{user=%C3%A9%0A%FF}:u:token_bucket",
			"fg:{global}:token_bucket",
		}},
	}
	for _, tc := range cases {
		got := keys(l.Buckets(nil, &floodgate.Request{Method: "/a.B/C", Identity: tc.id}))
		if strings.Join(got, " ") != strings.Join(tc.want, " ") {
			t.Errorf("identity %+v:\n got %q\nwant %q", tc.id, got, tc.want)
		}
		for _, k := range got {
			if strings.Contains(k, "secret") {
				t.Errorf("raw API key in %q", k)
			}
		}
	}
}

func TestKeyPrefix(t *testing.T) {
	l := designLimiter(t, tiers.WithKeyPrefix("shop:rl:"))
	got := l.Buckets(nil, &floodgate.Request{Method: "/x.Y/Z", Identity: floodgate.Identity{IP: netip.MustParseAddr("192.0.2.7")}})
	if len(got) != 1 || got[0].Key != "shop:rl:{ip=192.0.2.7}:ip-safety-net:token_bucket" {
		t.Errorf("Buckets = %q", keys(got))
	}
	p, _ := loadFile("testdata/policy.yaml")
	for _, bad := range []string{"a{b", "x}", "sp ace", strings.Repeat("a", 65)} {
		if _, err := tiers.NewLimiter(newMemstore(t), p, tiers.WithKeyPrefix(bad)); !errors.Is(err, tiers.ErrKeyPrefix) {
			t.Errorf("WithKeyPrefix(%q): err = %v, want ErrKeyPrefix", bad, err)
		}
	}
}

const fuzzKeyPolicy = `
rules:
  - {name: all, key: [tenant, user, api_key, ip, endpoint], rate: 1/1s}
  - {name: t, key: [tenant], rate: 1/1s}
  - {name: u, key: [user], rate: 1/1s}
  - {name: e, key: [endpoint], rate: 1/1s}
`

type fuzzIdentity struct {
	method, tenant, user, apiKey string
	ip                           netip.Addr
}

// bucketNet is the network an address is keyed on under the default
// prefixes (/32, /64), an IPv4-mapped address as the IPv4 it maps: the
// reference the fuzzers compare keys with.
func bucketNet(a netip.Addr) netip.Prefix {
	if !a.IsValid() {
		return netip.Prefix{}
	}
	a = a.Unmap()
	bits := 64
	if a.Is4() {
		bits = 32
	}
	p, _ := a.Prefix(bits)
	return p
}

func (f fuzzIdentity) request() *floodgate.Request {
	return &floodgate.Request{Method: f.method, Identity: floodgate.Identity{Tenant: f.tenant, User: f.user, APIKey: f.apiKey, IP: f.ip}}
}

func fuzzAddr(b []byte) netip.Addr {
	switch len(b) {
	case 4:
		return netip.AddrFrom4([4]byte(b))
	case 16:
		return netip.AddrFrom16([16]byte(b))
	}
	return netip.Addr{}
}

// refEscape is an independent reference for key values: what the key of a
// short client-supplied component must read.
func refEscape(s string) string {
	if len(s) > 64 {
		sum := sha256.Sum256([]byte(s))
		return "#" + hex.EncodeToString(sum[:16])
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-' {
			b.WriteByte(c)
		} else {
			b.WriteString("%" + strings.ToUpper(hex.EncodeToString([]byte{c})))
		}
	}
	return b.String()
}

// FuzzKey: two different identities never share a key, every key has
// exactly one hash tag, ours, naming the rule's first scope, and keys are
// made only of the characters the format allows.
func FuzzKey(f *testing.F) {
	f.Add("/a.B/C", "acme", "bob", "k1", []byte{10, 0, 0, 1}, "/a.B/C", "acme", "bob", "k2", []byte{10, 0, 0, 1})
	f.Add("/a.B/C", "a:b", "c", "", []byte{}, "/a.B/C", "a", "b:c", "", []byte{})
	f.Add("/x", "}{", "{}", "{", []byte{1, 2, 3, 4}, "/x", "%7D%7B", "%7B%7D", "%7B", []byte{1, 2, 3, 4})
	f.Add("GET /v1/items/{id}", strings.Repeat("t", 65), "u\n", "\xff", make([]byte, 16), "GET /v1/items/{id}", "#"+strings.Repeat("0", 32), "u%0A", "\xfe", make([]byte, 16))
	f.Add("/m", strings.Repeat("é", 40), "=", ":", []byte{}, "/m", strings.Repeat("é", 41), "%3D", "%3A", []byte{})
	l := mustLimiter(f, newMemstore(f), fuzzKeyPolicy)
	allowed := func(c byte) bool {
		return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.IndexByte("._-%#:={}", c) >= 0
	}
	check := func(t *testing.T, id fuzzIdentity, bs []quota.Bucket) map[string]string {
		rules := map[string]string{}
		for _, b := range bs {
			k := b.Key
			for i := 0; i < len(k); i++ {
				if !allowed(k[i]) {
					t.Fatalf("key %q has byte %q", k, k[i])
				}
			}
			if strings.Count(k, "{") != 1 || strings.Count(k, "}") != 1 || !strings.HasPrefix(k, "fg:{") {
				t.Fatalf("key %q does not have exactly one hash tag at the front", k)
			}
			tag := k[len("fg:{"):strings.IndexByte(k, '}')]
			rest := k[strings.IndexByte(k, '}')+2:]
			rule, _, _ := strings.Cut(rest, ":")
			var want string
			switch rule {
			case "all", "t":
				want = "tenant=" + refEscape(id.tenant)
			case "u":
				want = "user=" + refEscape(id.user)
			case "e":
				want = "endpoint=" + refEscape(id.method)
			default:
				t.Fatalf("key %q names no rule of the policy", k)
			}
			if tag != want {
				t.Fatalf("key %q: tag %q, want %q", k, tag, want)
			}
			rules[rule] = k
		}
		return rules
	}
	f.Fuzz(func(t *testing.T, m1, t1, u1, k1 string, ip1 []byte, m2, t2, u2, k2 string, ip2 []byte) {
		a := fuzzIdentity{m1, t1, u1, k1, fuzzAddr(ip1)}
		b := fuzzIdentity{m2, t2, u2, k2, fuzzAddr(ip2)}
		ka := check(t, a, l.Buckets(nil, a.request()))
		kb := check(t, b, l.Buckets(nil, b.request()))
		same := map[string]bool{
			"all": a.method == b.method && a.tenant == b.tenant && a.user == b.user && a.apiKey == b.apiKey && bucketNet(a.ip) == bucketNet(b.ip),
			"t":   a.tenant == b.tenant,
			"u":   a.user == b.user,
			"e":   a.method == b.method,
		}
		for rule, x := range ka {
			y, ok := kb[rule]
			if !ok {
				continue
			}
			if (x == y) != same[rule] {
				t.Fatalf("rule %s: identities %+v and %+v give keys %q and %q", rule, a, b, x, y)
			}
		}
		// Keys of different rules never collide.
		seen := map[string]string{}
		for rule, x := range ka {
			if other, dup := seen[x]; dup {
				t.Fatalf("rules %s and %s share key %q", rule, other, x)
			}
			seen[x] = rule
		}
		// The API key is always hashed: the value after "api_key=" is '#'
		// and 32 hex digits of SHA-256, never the raw key.
		if k, ok := ka["all"]; ok {
			_, v, _ := strings.Cut(k, ":api_key=")
			v, _, _ = strings.Cut(v, ":")
			sum := sha256.Sum256([]byte(a.apiKey))
			if v != "#"+hex.EncodeToString(sum[:16]) {
				t.Fatalf("key %q: api_key value %q is not the hashed key", k, v)
			}
		}
	})
}

func TestMatchAndNoKeyTierRule(t *testing.T) {
	l := mustLimiter(t, newMemstore(t), `
tiers:
  free: {rate: 10/1m}
  pro: {rate: 100/1m, burst: 50, algorithm: gcra}
default_tier: free
rules:
  - {name: items, match: {method: "GET /v1/items/{id}"}, rate: 5/1s}
  - {name: svc, match: {method: "/search.v1.Search/*"}, rate: 5/1s}
  - {name: plan, rate: tier}
  - {name: any-verb, match: {method: "* /v1/orders/{id}"}, rate: 5/1s}
`)
	for _, tc := range []struct {
		method, tier string
		want         []string
	}{
		{"GET /v1/items/{id}", "pro", []string{"fg:{items}:token_bucket", "fg:{plan}:gcra"}},
		{"GET /v1/items/7", "", []string{"fg:{plan}:token_bucket"}},
		{"/search.v1.Search/Query", "nope", []string{"fg:{svc}:token_bucket", "fg:{plan}:token_bucket"}},
		{"/search.v1.Search/Query/x", "free", []string{"fg:{plan}:token_bucket"}},
		{"/search.v1.Searcher/Query", "pro", []string{"fg:{plan}:gcra"}},
		{"DELETE /v1/orders/{id}", "pro", []string{"fg:{plan}:gcra", "fg:{any-verb}:token_bucket"}},
	} {
		got := keys(l.Buckets(nil, &floodgate.Request{Method: tc.method, Tier: tc.tier}))
		if strings.Join(got, " ") != strings.Join(tc.want, " ") {
			t.Errorf("%s tier %q: keys %q, want %q", tc.method, tc.tier, got, tc.want)
		}
	}
}

func TestOverrideAlgorithm(t *testing.T) {
	l := mustLimiter(t, newMemstore(t), `
rules:
  - {name: u, key: [user, ip], rate: 10/1s, algorithm: gcra}
overrides:
  - {rule: u, key: {user: a, ip: "::ffff:10.0.0.1"}, rate: 50/1s}
  - {rule: u, key: {user: b, ip: "10.0.0.1"}, rate: 60/1m, algorithm: token_bucket, burst: 5}
`)
	// An IPv4-mapped IPv6 address is the IPv4 address it maps, in the
	// policy and in requests alike: one key, one override.
	for _, tc := range []struct {
		user, ip string
		want     quota.Bucket
	}{
		{"a", "::ffff:10.0.0.1", quota.Bucket{Key: "fg:{user=a}:u:ip=10.0.0.1:gcra", Limit: quota.Limit{Algorithm: quota.GCRA, Rate: 50, Period: time.Second, Burst: 50}, Cost: 1, Rule: "u"}},
		{"a", "10.0.0.1", quota.Bucket{Key: "fg:{user=a}:u:ip=10.0.0.1:gcra", Limit: quota.Limit{Algorithm: quota.GCRA, Rate: 50, Period: time.Second, Burst: 50}, Cost: 1, Rule: "u"}},
		{"a", "10.0.0.2", quota.Bucket{Key: "fg:{user=a}:u:ip=10.0.0.2:gcra", Limit: quota.Limit{Algorithm: quota.GCRA, Rate: 10, Period: time.Second, Burst: 10}, Cost: 1, Rule: "u"}},
		{"b", "::ffff:10.0.0.1", quota.Bucket{Key: "fg:{user=b}:u:ip=10.0.0.1:token_bucket", Limit: quota.Limit{Rate: 60, Period: time.Minute, Burst: 5}, Cost: 1, Rule: "u"}},
		{"b", "10.0.0.1", quota.Bucket{Key: "fg:{user=b}:u:ip=10.0.0.1:token_bucket", Limit: quota.Limit{Rate: 60, Period: time.Minute, Burst: 5}, Cost: 1, Rule: "u"}},
	} {
		got := l.Buckets(nil, &floodgate.Request{Method: "/a/B", Identity: floodgate.Identity{User: tc.user, IP: netip.MustParseAddr(tc.ip)}})
		if len(got) != 1 || got[0] != tc.want {
			t.Errorf("%s %s: %+v\nwant %+v", tc.user, tc.ip, got, tc.want)
		}
	}
	if got := l.Buckets(nil, nil); len(got) != 0 {
		t.Errorf("Buckets(nil request) = %v", got)
	}
	if _, _, err := l.Admit(context.Background(), nil); err == nil || err.Error() != "tiers: Admit: request is nil" {
		t.Errorf("Admit(nil) error = %v", err)
	}
}

// loadFile loads the policy file at path with tiers.Load (a file of rate
// limits only; package policyfile reads files for programs).
func loadFile(path string) (*tiers.Policy, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	return tiers.Load(data)
}
