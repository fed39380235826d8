package policyfile_test

import (
	"path/filepath"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate/policyfile"
)

// The outbound: section loads its rules through package tiers and its
// cooldown: here; a section of cooldown alone has no rules.
func TestLoadOutbound(t *testing.T) {
	f, err := policyfile.Load([]byte(`rules: []
outbound:
  cooldown: {default: 2s, max: 30s, sync: 50ms}
  rules:
    - name: vendor
      match: {method: "/api.vendor.com/v1/*"}
      rate: 50/1s
      burst: 10
      max_wait: 500ms
`))
	if err != nil {
		t.Fatal(err)
	}
	if f.Outbound == nil || len(f.Outbound.Rules) != 1 || f.Outbound.Rules[0].Name != "vendor" || f.Outbound.Rules[0].MaxWait != 500*time.Millisecond {
		t.Fatalf("outbound: %+v", f.Outbound)
	}
	if f.CooldownDefault != 2*time.Second || f.CooldownMax != 30*time.Second || f.CooldownSync != 50*time.Millisecond {
		t.Fatalf("cooldown: %v %v %v", f.CooldownDefault, f.CooldownMax, f.CooldownSync)
	}
	if len(f.Limits.Rules) != 0 {
		t.Fatalf("the outbound rules reached the inbound policy: %+v", f.Limits.Rules)
	}
	f, err = policyfile.Load([]byte("rules: []\noutbound:\n  cooldown: {default: 3s}\n"))
	if err != nil || f.Outbound == nil || len(f.Outbound.Rules) != 0 || f.CooldownDefault != 3*time.Second {
		t.Fatalf("cooldown alone: %+v, %v", f, err)
	}
	f, err = policyfile.Load([]byte("rules: []\nidentity: {client_ip: {ipv4_prefix: 24}}\noutbound:\n  rules:\n    - {name: per-net, key: [ip], rate: 5/1s}\n"))
	if err != nil || f.Outbound.Rules[0].IPv4Prefix != 24 {
		t.Fatalf("identity's ipv4_prefix on an outbound rule keyed on ip: %+v, %v", f, err)
	}
	if f, _ := policyfile.Load([]byte("rules: []\n")); f.Outbound != nil || len(f.OutboundLimits().Rules) != 0 {
		t.Fatal("a file without outbound: has an outbound section")
	}
}

// Every mistake in outbound: is reported under its path and line.
func TestLoadOutboundErrors(t *testing.T) {
	for _, tc := range []struct{ yaml, want string }{
		{"outbound:\n  rules:\n    - name: v\n      rate: 50/forever\n",
			`outbound.rules[0].rate: "50/forever" is not N/duration (the duration is 500ms, 10s, 1m, 1h, 1d or 1w; day, week, month or year for calendar windows), at line 5`},
		{"outbound:\n  rules:\n    - name: v\n      match: {method: api.vendor.com}\n      rate: 1/1s\n",
			`outbound.rules[0].match.method: "api.vendor.com" is neither a gRPC method (/pkg.Svc/Method) nor an HTTP route (GET /path), at line 5`},
		{"outbound:\n  exempt: [10.0.0.0/8]\n",
			"outbound.exempt: unknown field (an outbound section holds tiers, default_tier, rules, overrides, shadow and cooldown), at line 3"},
		{"outbound:\n  cooldown: {default: 2m, max: 30s}\n", "outbound.cooldown.default: 2m0s is longer than max 30s, at line 3"},
		{"outbound:\n  cooldown:\n    max: 2h\n", "outbound.cooldown.max: 2h0m0s is longer than 1h0m0s, at line 4"},
		{"outbound:\n  cooldown:\n    sync: 0s\n", `outbound.cooldown.sync: "0s" is not a positive duration such as 100ms, at line 4`},
		{"outbound:\n  cooldown: {sync: 1m}\n", "outbound.cooldown.sync: 1m0s is longer than 10s: replicas would learn of a cooldown too late, at line 3"},
		{"outbound:\n  cooldown: {after: 1s}\n", "outbound.cooldown.after: unknown field, at line 3"},
		{"outbound: [1]\n", "outbound: must be a mapping, got a list, at line 2"},
	} {
		_, err := policyfile.Load([]byte("rules: []\n" + tc.yaml))
		if err == nil || err.Error() != tc.want {
			t.Errorf("Load(%q):\n got %v\nwant %s", tc.yaml, err, tc.want)
		}
	}
}

// Watch sets Targets.Outbound to the outbound: section's rules, to no
// rules when the section leaves, and refuses the section without it.
func TestWatchAppliesOutbound(t *testing.T) {
	path := filepath.Join(t.TempDir(), "policy.yaml")
	l := mustLimiter(t, newMemstore(t), "rules: []\n")
	out := mustLimiter(t, newMemstore(t), "rules: []\n")
	var last error
	poll, err := policyfile.NewPoller(path, policyfile.Targets{Limits: l, Outbound: out},
		policyfile.WithLogger(discardLogger()), policyfile.WithOnReload(func(_ *policyfile.File, err error) { last = err }))
	if err != nil {
		t.Fatal(err)
	}
	writeAtomic(t, path, "rules: []\noutbound:\n  rules:\n    - {name: vendor, rate: 5/1s}\n")
	poll()
	poll()
	if last != nil || len(out.Policy().Rules) != 1 || len(l.Policy().Rules) != 0 {
		t.Fatalf("after a file with outbound rules: %v, outbound %+v, inbound %+v", last, out.Policy().Rules, l.Policy().Rules)
	}
	writeAtomic(t, path, "rules: []\n")
	poll()
	poll()
	if last != nil || len(out.Policy().Rules) != 0 {
		t.Fatalf("after the section left: %v, outbound %+v", last, out.Policy().Rules)
	}

	poll2, err := policyfile.NewPoller(path, policyfile.Targets{Limits: l},
		policyfile.WithLogger(discardLogger()), policyfile.WithOnReload(func(_ *policyfile.File, err error) { last = err }))
	if err != nil {
		t.Fatal(err)
	}
	writeAtomic(t, path, "rules: []\noutbound:\n  cooldown: {default: 1s}\n")
	poll2()
	poll2()
	want := "outbound: the file sets an outbound Limiter's settings, but Watch was given none (Targets.Outbound), at line 3"
	if last == nil || last.Error() != want {
		t.Fatalf("outbound: without Targets.Outbound: %v\nwant %s", last, want)
	}
}
