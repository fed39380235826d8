package policyfile_test

import (
	"context"
	"errors"
	"net/netip"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate/policyfile"
)

// TestIdentitySection: every key of identity: decodes, header names are
// lower-cased, and the IP prefix lengths become the default of the rules
// keyed on ip (a rule's own wins; a rule without ip is left alone).
func TestIdentitySection(t *testing.T) {
	f, err := policyfile.Load([]byte(`
identity:
  user: header:X-User-Id
  tenant: [claim:tenant, header:x-tenant-id]
  api_key: header:x-api-key
  tier: claim:plan
  client_ip:
    header: Forwarded
    trusted_proxies: [10.0.0.0/8, 192.168.1.10, "2001:db8::/32"]
    ipv4_prefix: 24
    ipv6_prefix: 48
rules:
  - {name: per-ip, key: [ip], rate: 10/1s}
  - {name: per-ip-own, key: [ip], rate: 10/1s, ipv6_prefix: 56}
  - {name: per-user, key: [user], rate: 10/1s}
`))
	if err != nil {
		t.Fatal(err)
	}
	want := policyfile.Identity{
		User: []string{"header:x-user-id"}, Tenant: []string{"claim:tenant", "header:x-tenant-id"},
		APIKey: []string{"header:x-api-key"}, Tier: []string{"claim:plan"},
		ClientIPHeader: "forwarded",
		TrustedProxies: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("192.168.1.10/32"), netip.MustParsePrefix("2001:db8::/32")},
		IPv4Prefix:     24, IPv6Prefix: 48,
	}
	if f.Identity == nil || !reflect.DeepEqual(*f.Identity, want) {
		t.Errorf("Identity = %+v\nwant       %+v", f.Identity, want)
	}
	rules := f.Limits.Rules
	if rules[0].IPv4Prefix != 24 || rules[0].IPv6Prefix != 48 || rules[1].IPv4Prefix != 24 || rules[1].IPv6Prefix != 56 || rules[2].IPv4Prefix != 0 || rules[2].IPv6Prefix != 0 {
		t.Errorf("prefixes: %d/%d, %d/%d, %d/%d", rules[0].IPv4Prefix, rules[0].IPv6Prefix, rules[1].IPv4Prefix, rules[1].IPv6Prefix, rules[2].IPv4Prefix, rules[2].IPv6Prefix)
	}
}

// TestIdentityErrors: each mistake is named with its path and line.
func TestIdentityErrors(t *testing.T) {
	for _, tc := range []struct{ yaml, want string }{
		{"identity:\n  user: x-user-id\n", `identity.user: "x-user-id" is not header:NAME or claim:NAME, at line 2`},
		{"identity:\n  user: [header:x-user, cookie:sid]\n", `identity.user[1]: "cookie:sid" is not header:NAME or claim:NAME, at line 2`},
		{"identity:\n  tenant: \"claim:\"\n", `identity.tenant: "claim:" names no claim, at line 2`},
		{"identity:\n  tenant: \"header:x tenant\"\n", `identity.tenant: "x tenant" is not a header name`},
		{"identity:\n  user: []\n", "identity.user: an empty list gives no source"},
		{"identity:\n  group: header:x-group\n", "identity.group: unknown field, at line 2"},
		{"identity:\n  client_ip:\n    header: x-client-ip\n    trusted_proxies: [10.0.0.0/8]\n", `identity.client_ip.header: "x-client-ip" is not one of x-forwarded-for, forwarded, x-real-ip, at line 3`},
		{"identity:\n  client_ip:\n    header: x-real-ip\n", "identity.client_ip.header: a forwarding header is believed only from trusted proxies"},
		{"identity:\n  client_ip:\n    trusted_proxies: [10.0.0.1/8]\n", `identity.client_ip.trusted_proxies[0]: 10.0.0.1/8 has bits set past /8: write 10.0.0.0/8, at line 3`},
		{"identity:\n  client_ip:\n    trusted_proxies: [proxy.internal]\n", `"proxy.internal" is not an IP address or CIDR`},
		{"identity:\n  client_ip:\n    ipv4_prefix: 33\n", "identity.client_ip.ipv4_prefix: 33 is more than 32 bits, at line 3"},
	} {
		_, err := policyfile.Load([]byte(tc.yaml + "rules: []\n"))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Load(%q) = %v\nwant %q", tc.yaml, err, tc.want)
		}
	}
}

// TestWatchRefusesIdentityChange: a transport reads identities as it was
// built, so a reload that changes identity: (or adds one to a file that
// had none) is refused and the policy in force stays; the same section
// with other rules reloads.
func TestWatchRefusesIdentityChange(t *testing.T) {
	const id = "identity:\n  user: header:x-user-id\n"
	path := filepath.Join(t.TempDir(), "policy.yaml")
	writeAtomic(t, path, id+"rules:\n  - {name: first, key: [user], rate: 1/1h}\n")
	built, err := policyfile.LoadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	l := mustLimiter(t, newMemstore(t), "rules: []\n")
	reloads := make(chan reload, 16)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- policyfile.Watch(ctx, path, policyfile.Targets{Limits: l, Identity: built.Identity},
			policyfile.WithInterval(5*time.Millisecond),
			policyfile.WithOnReload(func(f *policyfile.File, err error) { reloads <- reload{f, err} }))
	}()
	defer func() {
		cancel()
		if err := <-done; !errors.Is(err, context.Canceled) {
			t.Errorf("Watch returned %v", err)
		}
	}()
	if rl := nextReload(t, reloads); rl.err != nil {
		t.Fatalf("first load: %v", rl.err)
	}
	writeAtomic(t, path, "identity:\n  user: header:x-other\nrules:\n  - {name: second, key: [user], rate: 1/1h}\n")
	if rl := nextReload(t, reloads); rl.err == nil || !strings.Contains(rl.err.Error(), "identity: differs from the section the transport was built with") || l.Policy().Rules[0].Name != "first" {
		t.Fatalf("changed identity: %+v, policy %s", rl, l.Policy().Rules[0].Name)
	}
	writeAtomic(t, path, "rules:\n  - {name: second, key: [user], rate: 1/1h}\n")
	if rl := nextReload(t, reloads); rl.err == nil || l.Policy().Rules[0].Name != "first" {
		t.Fatalf("identity removed: %+v", rl)
	}
	writeAtomic(t, path, id+"rules:\n  - {name: third, key: [user], rate: 1/1h}\n")
	if rl := nextReload(t, reloads); rl.err != nil || l.Policy().Rules[0].Name != "third" {
		t.Fatalf("same identity, new rules: %+v", rl)
	}

	// Targets without Identity: a file with the section is refused.
	bare := mustLimiter(t, newMemstore(t), "rules: []\n")
	ctx2, cancel2 := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel2()
	errs := make(chan error, 1)
	go func() {
		_ = policyfile.Watch(ctx2, path, policyfile.Targets{Limits: bare},
			policyfile.WithInterval(5*time.Millisecond),
			policyfile.WithOnReload(func(_ *policyfile.File, err error) { errs <- err; cancel2() }))
	}()
	if err := <-errs; err == nil || !strings.Contains(err.Error(), "Targets.Identity") {
		t.Errorf("identity: without a target: %v", err)
	}
}
