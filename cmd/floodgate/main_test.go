package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestValidateReportsEveryErrorWithItsLine(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.yaml")
	os.WriteFile(bad, []byte(`rules:
  - name: login
    key: [ip]
    rate: 5/minute
  - name: search
    key: [usr]
    rate: 10/1s
`), 0o644)
	good := filepath.Join(dir, "good.yaml")
	os.WriteFile(good, []byte(`rules:
  - name: ip
    key: [ip]
    rate: 100/1m
`), 0o644)

	var out, errOut bytes.Buffer
	code := run([]string{"validate", good, bad}, &out, &errOut)
	if code != 1 {
		t.Fatalf("exit code = %d, want 1; stderr:\n%s", code, errOut.String())
	}
	if !strings.Contains(out.String(), good+": ok (1 rules") {
		t.Errorf("stdout lacks the good file's verdict:\n%s", out.String())
	}
	for _, want := range []string{bad + ": invalid", "rules[0].rate", "line 4", "rules[1].key", "line 6"} {
		if !strings.Contains(errOut.String(), want) {
			t.Errorf("stderr lacks %q:\n%s", want, errOut.String())
		}
	}
}

func TestValidateGoodFileExitsZero(t *testing.T) {
	var out, errOut bytes.Buffer
	if code := run([]string{"validate", "../../internal/demo/policy.yaml"}, &out, &errOut); code != 0 {
		t.Fatalf("exit code = %d; stderr:\n%s", code, errOut.String())
	}
}

func TestUsageErrors(t *testing.T) {
	for _, args := range [][]string{nil, {"frobnicate"}, {"validate"}, {"demo", "extra"}} {
		var out, errOut bytes.Buffer
		if code := run(args, &out, &errOut); code != 2 {
			t.Errorf("run(%q) = %d, want 2", args, code)
		}
	}
}

// TestValidateHelp: -h and --help print the usage and exit 0; they are
// never taken for a policy file.
func TestValidateHelp(t *testing.T) {
	for _, h := range []string{"-h", "--help"} {
		var out, errOut bytes.Buffer
		if code := run([]string{"validate", h}, &out, &errOut); code != 0 || !strings.Contains(errOut.String(), "usage: floodgate validate") || strings.Contains(errOut.String(), ": invalid") {
			t.Errorf("validate %s: code %d, stderr %q", h, code, errOut.String())
		}
	}
	var out, errOut bytes.Buffer
	if code := run([]string{"validate", "-bogus"}, &out, &errOut); code != 2 {
		t.Errorf("validate -bogus: code %d, want 2", code)
	}
}

// TestDemoFlags: -h prints the demo's usage; a malformed -redis-fault, one
// that does not fit in the run, or one combined with an external Redis is a
// usage error (exit 2) that says what is wrong, before anything starts.
func TestDemoFlags(t *testing.T) {
	var out, errOut bytes.Buffer
	if code := run([]string{"demo", "-h"}, &out, &errOut); code != 0 || !strings.Contains(errOut.String(), "-redis-fault") {
		t.Errorf("demo -h: code %d, stderr %q", code, errOut.String())
	}
	t.Setenv("REDIS_URL", "")
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"demo", "--redis-fault", "kill"}, "missing @AT"},
		{[]string{"demo", "--redis-fault", "explode@8s"}, `unknown kind "explode"`},
		{[]string{"demo", "--redis-fault", "pause@8s:soon"}, `FOR "soon" is not a duration`},
		{[]string{"demo", "-duration", "5s", "--redis-fault", "kill@8s"}, "not before the end of the 5s run"},
		{[]string{"demo", "-duration", "5s", "--redis-fault", "pause@4s:2s"}, "ends at 6s"},
		{[]string{"demo", "-redis", "redis://127.0.0.1:1", "--redis-fault", "kill@8s"}, "unset REDIS_URL"},
		{[]string{"demo", "-compare", "500ms"}, `"500ms" is not a duration of at least 1s, or off`},
		{[]string{"demo", "-compare", "never"}, `"never" is not a duration of at least 1s, or off`},
	} {
		var out, errOut bytes.Buffer
		if code := run(c.args, &out, &errOut); code != 2 || !strings.Contains(errOut.String(), c.want) {
			t.Errorf("run(%q) = %d, stderr %q; want 2 and %q", c.args, code, errOut.String(), c.want)
		}
		if out.Len() > 0 {
			t.Errorf("run(%q) started the demo: %q", c.args, out.String())
		}
	}
}

// TestDemoCompareFlag: -compare off leaves the overload comparison out of
// the demo's output; -compare 1s runs it, each of its three runs 1s long.
func TestDemoCompareFlag(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the demo twice")
	}
	t.Setenv("REDIS_URL", "")
	for _, c := range []struct {
		compare string
		want    bool
	}{{"off", false}, {"1s", true}} {
		var out, errOut bytes.Buffer
		if code := run([]string{"demo", "-duration", "1s", "-report", "", "-compare", c.compare}, &out, &errOut); code != 0 {
			t.Fatalf("demo -compare %s: exit %d, stderr %q", c.compare, code, errOut.String())
		}
		if got := strings.Contains(out.String(), "\nOverload: "); got != c.want {
			t.Errorf("demo -compare %s: comparison in the output: %v, want %v\n%s", c.compare, got, c.want, out.String())
		}
	}
}

// TestValidateNotes: a valid policy's shadow mode, partial roll-outs,
// soft, local-first, settling and waiting rules and the client headers it
// reads are printed under its verdict; a bad match and a rule both soft
// and shadow are named with their lines.
func TestValidateNotes(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "rollout.yaml")
	os.WriteFile(good, []byte(`rules:
  - name: search-mobile
    match: {header: {X-Client-Type: [ios]}}
    key: [ip, header:x-region]
    rate: [5/1s, 100/1h]
    enforce_percent: 10
  - {name: dry, key: [ip], rate: 1/1s, shadow: true}
  - {name: overage, key: [ip], rate: 5/1s, soft: true}
`), 0o644)
	shadow := filepath.Join(dir, "shadow.yaml")
	os.WriteFile(shadow, []byte("shadow: true\nrules:\n  - {name: ip, key: [ip], rate: 1/1s, enforce_percent: 10}\n"), 0o644)
	local := filepath.Join(dir, "local.yaml")
	os.WriteFile(local, []byte(`rules:
  - {name: tenant, key: [tenant], rate: 1000/1s, consistency: async}
  - {name: user, key: [user], rate: 100/1s, consistency: leased}
  - {name: tokens, key: [tenant], rate: 10000/1m, settle: true}
  - {name: output, key: [tenant], rate: 10000/1m, settle: true, meter: output_tokens}
  - {name: burst, key: [user], rate: 10/1s, max_wait: 200ms}
`), 0o644)
	bad := filepath.Join(dir, "bad.yaml")
	os.WriteFile(bad, []byte("rules:\n  - name: a\n    rate: 1/1s\n    match:\n      header: {cookie: [x]}\n"), 0o644)
	badSoft := filepath.Join(dir, "bad-soft.yaml")
	os.WriteFile(badSoft, []byte("rules:\n  - name: a\n    rate: 1/1s\n    shadow: true\n    soft: true\n"), 0o644)

	var out, errOut bytes.Buffer
	if code := run([]string{"validate", good, shadow, local, bad, badSoft}, &out, &errOut); code != 1 {
		t.Fatalf("exit code %d, want 1; stderr:\n%s", code, errOut.String())
	}
	want := good + ": ok (3 rules, 0 tiers, 0 overrides)\n" +
		"  rule search-mobile: enforced for 10% of its keys, reported only for the others\n" +
		"  rule dry: shadow, reported only\n" +
		"  rule overage: soft, admits a call over its limit and marks it (X-RateLimit-Soft-Exceeded, Request.SoftExceeded, floodgate.soft_exceeded), charging it nothing there\n" +
		"  reads headers x-client-type, x-region (clients choose them: they select and split limits, they are no identity)\n" +
		shadow + ": ok (1 rules, 0 tiers, 0 overrides)\n" +
		"  shadow: every rule is decided and reported, none denies\n" +
		local + ": ok (5 rules, 0 tiers, 0 overrides)\n" +
		"  rule tenant: async, decided locally and reported every 50ms or later, may admit over the limit by its documented bound (needs a tiers/localfirst store: a Limiter over any other refuses it)\n" +
		"  rule user: leased, decided locally from units leased from the store, never over the limit (needs a tiers/localfirst store: a Limiter over any other refuses it)\n" +
		"  rule tokens: settles, charged its cost when admitted and corrected to the request's actual cost when it ends\n" +
		"  rule output: settles meter output_tokens, charged its cost or the meter's estimate when admitted and corrected to the value the handler reports for output_tokens (floodgate.ReportMeter) when it ends\n" +
		"  rule burst: waits up to 200ms for its units instead of denying, at most 64 requests of a bucket at once per process\n"
	if out.String() != want {
		t.Errorf("stdout:\n%s\nwant:\n%s", out.String(), want)
	}
	if !strings.Contains(errOut.String(), `rules[0].match.header.cookie: header "cookie" cannot be matched or keyed on`) || !strings.Contains(errOut.String(), "at line 5") {
		t.Errorf("stderr:\n%s", errOut.String())
	}
	if !strings.Contains(errOut.String(), "rules[0].soft: a rule is soft (admit and mark) or shadow (report only), not both: remove one, at line 5") {
		t.Errorf("stderr lacks the soft rule's error and line:\n%s", errOut.String())
	}
}

// TestValidateStageSections: validate reads a file's shedder: and
// concurrency: sections, names the stages they set, and names the line of
// a mistake in them.
func TestValidateStageSections(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "stages.yaml")
	os.WriteFile(good, []byte("rules: []\nshedder:\n  capacity: 50\nconcurrency:\n  global: 100\n  per_key:\n    - {name: per-user, key: user, cap: 4}\n"+
		"outbound:\n  cooldown: {default: 2s}\n  rules:\n    - {name: vendor, match: {method: \"/api.vendor.com/v1/*\"}, rate: 50/1s, max_wait: 200ms}\n"), 0o644)
	bad := filepath.Join(dir, "bad.yaml")
	os.WriteFile(bad, []byte("rules: []\nshedder:\n  adaptive: {min: 10, max: 5}\noutbound:\n  rules:\n    - {name: v, rate: 5/1s, burst: -1}\n"), 0o644)
	var out, errOut bytes.Buffer
	if code := run([]string{"validate", good, bad}, &out, &errOut); code != 1 {
		t.Fatalf("exit code %d, want 1; stderr:\n%s", code, errOut.String())
	}
	want := good + ": ok (0 rules, 0 tiers, 0 overrides)\n" +
		"  shedder: sets a shedder.Shedder's capacity and thresholds (policyfile.Targets.Shedder)\n" +
		"  concurrency.global: sets a concurrency.Limiter's global cap (policyfile.Targets.Concurrency)\n" +
		"  concurrency.per_key: sets the per-key caps a concurrency.Limiter was built with, by name (policyfile.Targets.Concurrency)\n" +
		"  outbound: 1 rules on the service's outgoing calls, and the fleet-wide cooldown when a peer refuses one (guard.Guard.RoundTripper, DialOptions; policyfile.Targets.Outbound)\n" +
		"  outbound rule vendor: waits up to 200ms for its units instead of denying, at most 64 requests of a bucket at once per process\n"
	if out.String() != want {
		t.Errorf("stdout:\n%s\nwant:\n%s", out.String(), want)
	}
	if !strings.Contains(errOut.String(), "shedder.adaptive.max: 5 must be >= min 10, at line 3") || !strings.Contains(errOut.String(), "outbound.rules[0].burst:") || !strings.Contains(errOut.String(), "at line 6") {
		t.Errorf("stderr:\n%s", errOut.String())
	}
}

// validate names each fairness and how it weighs callers.
func TestValidateNotesFairness(t *testing.T) {
	path := filepath.Join(t.TempDir(), "fair.yaml")
	if err := os.WriteFile(path, []byte(`identity: {tenant: header:x-tenant}
shedder:
  capacity: 100
  fairness: {by: tenant, weights: {pro: 4, free: 0.5}}
  fleet: {capacity: 400, fairness: {by: ip}}
rules: []
`), 0o600); err != nil {
		t.Fatal(err)
	}
	var out, errOut bytes.Buffer
	if code := run([]string{"validate", path}, &out, &errOut); code != 0 {
		t.Fatalf("exit code %d; stderr:\n%s", code, errOut.String())
	}
	for _, want := range []string{
		"  shedder.fairness: shares each priority among callers by tenant, weighted by plan tier (free 0.5, pro 4; other tiers 1; the transport must fill the tenant)\n",
		"  shedder.fleet.fairness: shares each priority among callers by ip, each weighing 1 (the transport must fill the ip)\n",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("stdout lacks %q:\n%s", want, out.String())
		}
	}
}
