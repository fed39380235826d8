package tiers_test

import (
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/quota"
	"github.com/floodgate-go/floodgate/tiers"
)

func TestLoadDesignPolicy(t *testing.T) {
	p, err := loadFile("testdata/policy.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if got, want := len(p.Rules), 7; got != want {
		t.Fatalf("len(Rules) = %d, want %d", got, want)
	}
	mobile, export := p.Rules[5], p.Rules[6]
	if !reflect.DeepEqual(mobile.Match.Header, map[string][]string{"x-client-type": {"ios", "android"}}) {
		t.Errorf("rules[5].match.header = %v", mobile.Match.Header)
	}
	if !reflect.DeepEqual(export.Key, []tiers.Scope{tiers.ScopeTenant, tiers.ScopeHeader}) || !reflect.DeepEqual(export.KeyHeaders, []string{"x-region"}) ||
		!reflect.DeepEqual(export.Windows, []tiers.Window{{Rate: tiers.Rate{N: 10, Period: time.Minute}, Burst: 10}, {Rate: tiers.Rate{N: 100, Period: 24 * time.Hour}, Burst: 100}}) ||
		export.Rate != (tiers.Rate{}) || export.EnforcePercent != 50 {
		t.Errorf("rules[6] = %+v", export)
	}
	login := p.Rules[0]
	if login.Name != "login-ip-user" || login.Match.Method != "/auth.v1.Auth/Login" ||
		len(login.Key) != 2 || login.Key[0] != tiers.ScopeIP || login.Key[1] != tiers.ScopeUser ||
		login.Rate != (tiers.Rate{N: 5, Period: time.Minute}) || login.Algorithm != quota.SlidingWindowLog ||
		!login.HideQuota || login.OnStoreError != quota.FailClosed {
		t.Errorf("rules[0] = %+v", login)
	}
	search := p.Rules[2]
	if search.Burst != 20 || search.Cost != 10 || search.Rate != (tiers.Rate{N: 10, Period: time.Second}) {
		t.Errorf("rules[2] = %+v", search)
	}
	if !p.Rules[3].Rate.Tier || p.DefaultTier != "free" {
		t.Errorf("rules[3].Rate = %+v, DefaultTier = %q", p.Rules[3].Rate, p.DefaultTier)
	}
	if got := p.Tiers["pro"]; !reflect.DeepEqual(got, tiers.Tier{Rate: tiers.Rate{N: 5000, Period: time.Hour}, Burst: 100}) {
		t.Errorf("tiers.pro = %+v", got)
	}
	if len(p.Overrides) != 1 || p.Overrides[0].Key[tiers.ScopeTenant] != "acme" || p.Overrides[0].Rate.N != 20000 {
		t.Errorf("overrides = %+v", p.Overrides)
	}
	if got := p.Methods["/report.v1.Report/Export"]; got != (floodgate.MethodOptions{Cost: 5, Priority: floodgate.PriorityRead}) {
		t.Errorf("methods = %+v", p.Methods)
	}
	if err := p.Validate(); err != nil {
		t.Errorf("Validate() of a loaded policy = %v", err)
	}
}

// TestLoadErrors is the table of malformed policies: each must be rejected
// with exactly this message (every error, one per line, in file order).
func TestLoadErrors(t *testing.T) {
	const rule = "rules:\n  - name: a\n"
	cases := []struct {
		name, yaml, want string
	}{
		{"empty", "", "policy is empty"},
		{"syntax", "rules: [\n", "invalid YAML: did not find expected node content, at line 1"},
		{"two documents", "rules: []\n---\nrules: []\n", "a policy is one YAML document; found another, at line 2"},
		{"not a mapping", "- a\n", "a policy must be a mapping (tiers, default_tier, rules, overrides, methods, exempt, deny, shadow), got a list, at line 1"},
		{"rules missing", "tiers: {}\n", `rules: required (write "rules: []" for a policy without rules), at line 1`},
		{"unknown top-level field", "rulez: []\nrules: []\n", "rulez: unknown field, at line 1"},
		{"unknown rule field", rule + "    rate: 1/1s\n    retries: 3\n", "rules[0].retries: unknown field, at line 4"},
		{"repeated field", rule + "    rate: 10/1s\n    rate: 5/1s\n", "rules[0].rate: repeated field (first at line 3), at line 4"},
		{"rate not N/duration", rule + "    rate: 5/minute\n", `rules[0].rate: "5/minute" is not N/duration (write 5/1m), at line 3`},
		{"rate zero", rule + "    rate: 0/1s\n", "rules[0].rate: rate 0 is out of range [1, 1000000000], at line 3"},
		{"period too short", rule + "    rate: 10/100us\n", "rules[0].rate: period 100µs is out of range [1ms, 8784h0m0s], at line 3"},
		{"period too long", rule + "    rate: 10/9000h\n", "rules[0].rate: period 9000h0m0s is out of range [1ms, 8784h0m0s], at line 3"},
		{"period not whole µs", rule + "    rate: 10/1000500ns\n", "rules[0].rate: period 1.0005ms is not a whole number of microseconds, at line 3"},
		{"rate missing", rule, "rules[0].rate: required, at line 2"},
		{"name missing", "rules:\n  - rate: 1/1s\n", "rules[0].name: required, at line 2"},
		{"bad name", "rules:\n  - name: 'bad name'\n    rate: 10/1s\n", `rules[0].name: "bad name" must match [A-Za-z0-9_.-]+, at line 2`},
		{"duplicate name", rule + "    rate: 1/1s\n  - name: a\n    rate: 2/1s\n", `rules[1].name: "a" is already the name of rules[0], at line 4`},
		{"burst zero", rule + "    rate: 1/1s\n    burst: 0\n", "rules[0].burst: 0 must be at least 1, at line 4"},
		{"cost over burst", rule + "    rate: 10/1s\n    burst: 20\n    cost: 30\n", "rules[0].cost: 30 exceeds the rule's capacity 20 (burst 20): such a request could never pass, at line 5"},
		{"cost over window rate", rule + "    rate: 10/1s\n    algorithm: fixed_window\n    cost: 11\n", "rules[0].cost: 11 exceeds the rule's capacity 10 (rate 10 per window): such a request could never pass, at line 5"},
		{"cost not integer", rule + "    rate: 1/1s\n    cost: 1.5\n", `rules[0].cost: must be an integer, got "1.5", at line 4`},
		{"burst on window algorithm", rule + "    rate: 10/1s\n    algorithm: fixed_window\n    burst: 5\n", "rules[0].burst: fixed_window has no burst; remove burst (its capacity is the rate, 10), at line 5"},
		{"unknown algorithm", rule + "    rate: 10/1s\n    algorithm: leaky\n", `rules[0].algorithm: unknown algorithm "leaky" (want one of token_bucket, gcra, sliding_window_counter, sliding_window_log, fixed_window), at line 4`},
		{"unknown fail mode", rule + "    rate: 10/1s\n    on_store_error: maybe\n", `rules[0].on_store_error: unknown on_store_error "maybe" (want local, open or closed), at line 4`},
		{"bool not bool", rule + "    rate: 1/1s\n    shadow: yes\n", `rules[0].shadow: must be true or false, got "yes", at line 4`},
		{"unknown and repeated scopes", rule + "    rate: 1/1s\n    key: [usr, ip, ip]\n",
			"rules[0].key[0]: unknown scope \"usr\" (want endpoint, user, api_key, ip, tenant or header:<name>), at line 4\n" +
				"rules[0].key[2]: scope \"ip\" is repeated, at line 4"},
		{"key not a list", rule + "    rate: 1/1s\n    key: ip\n", `rules[0].key: must be a list, got "ip", at line 4`},
		{"method neither gRPC nor HTTP", rule + "    rate: 1/1s\n    match: {method: search}\n", `rules[0].match.method: "search" is neither a gRPC method (/pkg.Svc/Method) nor an HTTP route (GET /path), at line 4`},
		{"method bad glob", rule + "    rate: 1/1s\n    match: {method: '/a/['}\n", `rules[0].match.method: "/a/[" is not a valid glob: syntax error in pattern, at line 4`},
		{"empty match", rule + "    rate: 1/1s\n    match: {}\n", "rules[0].match: must name a method, header or tier (omit match to apply the rule to every request), at line 4"},
		{"tier without default_tier", "tiers: {free: {rate: 1/1s}}\n" + rule + "    key: [tenant]\n    rate: tier\n", `rules[0].rate: "tier" needs default_tier, which is not set, at line 5`},
		{"unknown default_tier", "tiers: {free: {rate: 1/1s}}\ndefault_tier: gold\n" + rule + "    key: [tenant]\n    rate: tier\n", `default_tier: "gold" is not one of the tiers, at line 2`},
		{"burst on tier rule", "tiers: {free: {rate: 1/1s}}\ndefault_tier: free\n" + rule + "    key: [tenant]\n    rate: tier\n    burst: 3\n", `rules[0].burst: must not be set when rate is "tier" (the tier sets it), at line 7`},
		{"algorithm on tier rule", "tiers: {free: {rate: 1/1s, algorithm: gcra}}\ndefault_tier: free\n" + rule + "    rate: tier\n    algorithm: token_bucket\n", `rules[0].algorithm: must not be set when rate is "tier" (the tier sets it), at line 6`},
		{"tier cost over a tier's burst", "tiers:\n  free: {rate: 10/1s, burst: 2}\n  pro: {rate: 10/1s}\ndefault_tier: free\n" + rule + "    rate: tier\n    cost: 5\n",
			`rules[0].cost: 5 exceeds the capacity 2 of tier "free": such a request could never pass, at line 8`},
		{"tier rate missing", "tiers:\n  free: {burst: 2}\nrules: []\n", "tiers.free.rate: required, at line 2"},
		{"override of unknown rule", rule + "    key: [tenant]\n    rate: 1/1s\noverrides:\n  - {rule: b, key: {tenant: x}, rate: 2/1s}\n", `overrides[0].rule: no rule is named "b", at line 6`},
		{"override key scopes differ", rule + "    key: [tenant]\n    rate: 1/1s\noverrides:\n  - {rule: a, key: {user: x}, rate: 2/1s}\n", `overrides[0].key: scopes [user] do not match rule "a" key [tenant], at line 6`},
		{"override bad ip", rule + "    key: [ip]\n    rate: 1/1s\noverrides:\n  - {rule: a, key: {ip: not-ip}, rate: 2/1s}\n", `overrides[0].key.ip: "not-ip" is not an IP address or CIDR, at line 6`},
		{"override repeated", rule + "    key: [tenant]\n    rate: 1/1s\noverrides:\n  - {rule: a, key: {tenant: x}, rate: 2/1s}\n  - {rule: a, key: {tenant: x}, rate: 3/1s}\n", `overrides[1].key: rule "a" already has an override for this key, at line 7`},
		{"override below rule cost", rule + "    key: [tenant]\n    rate: 10/1s\n    cost: 5\noverrides:\n  - {rule: a, key: {tenant: x}, rate: 2/1s}\n", `overrides[0].rate: capacity 2 (burst 2) is less than rule "a" cost 5: such a request could never pass, at line 7`},
		{"method cost over capacity and bad priority", rule + "    rate: 10/1s\nmethods:\n  /a.B/C: {cost: 11, priority: urgent}\n",
			"methods[\"/a.B/C\"].priority: unknown priority \"urgent\" (want critical, write, read or test), at line 5\n" +
				"methods[\"/a.B/C\"].cost: 11 exceeds the capacity 10 of rule \"a\": such a request could never pass, at line 5"},
		{"unknown consistency", rule + "    rate: 10/1s\n    consistency: eventual\n", `rules[0].consistency: unknown consistency "eventual" (want exact, leased or async), at line 4`},
		{"leased on a window algorithm", rule + "    rate: 10/1s\n    algorithm: fixed_window\n    consistency: leased\n", "rules[0].consistency: leased needs token_bucket or gcra, not fixed_window, at line 5"},
		{"async on a tier with a window", "tiers:\n  free: {rate: 10/1m, algorithm: sliding_window_log}\ndefault_tier: free\n" + rule + "    rate: tier\n    consistency: async\n",
			`rules[0].consistency: async needs token_bucket or gcra, but tier "free" uses sliding_window_log, at line 7`},
		{"sync_interval without async", rule + "    rate: 10/1s\n    sync_interval: 50ms\n", "rules[0].sync_interval: is only for consistency async (the rule is exact), at line 4"},
		{"sync_interval out of range", rule + "    rate: 10/1s\n    consistency: async\n    sync_interval: 1m\n", "rules[0].sync_interval: 1m0s is out of range [1ms, 10s], at line 5"},
		{"sync_interval not a duration", rule + "    rate: 10/1s\n    consistency: async\n    sync_interval: soon\n", `rules[0].sync_interval: "soon" is not a positive duration such as 50ms, at line 5`},
		{"override algorithm on a leased rule", rule + "    key: [tenant]\n    rate: 10/1s\n    consistency: leased\noverrides:\n  - {rule: a, key: {tenant: x}, rate: 2/1s, algorithm: fixed_window}\n",
			`overrides[0].algorithm: rule "a" is leased, which needs token_bucket or gcra, not fixed_window, at line 7`},
		{"alias", "rules:\n  - &x {name: a, rate: 10/1s}\n  - *x\n", "rules[1]: YAML aliases are not supported, at line 3"},
		{"every error at once", "rules:\n  - name: a\n    rate: 5/minute\n  - name: a\n    rate: 0/1s\n    burst: 0\n    bogus: 1\n",
			"rules[0].rate: \"5/minute\" is not N/duration (write 5/1m), at line 3\n" +
				"rules[1].name: \"a\" is already the name of rules[0], at line 4\n" +
				"rules[1].rate: rate 0 is out of range [1, 1000000000], at line 5\n" +
				"rules[1].burst: 0 must be at least 1, at line 6\n" +
				"rules[1].bogus: unknown field, at line 7"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p, err := tiers.Load([]byte(tc.yaml))
			if err == nil {
				t.Fatalf("Load accepted %q: %+v", tc.yaml, p)
			}
			if p != nil {
				t.Errorf("Load returned a policy with its error")
			}
			if got := err.Error(); got != tc.want {
				t.Errorf("Load error:\n got: %s\nwant: %s", got, tc.want)
			}
			var pe *tiers.PolicyError
			if !errors.As(err, &pe) || len(pe.Errs) != strings.Count(tc.want, "\n")+1 {
				t.Errorf("error is not a *PolicyError with one FieldError per line: %#v", err)
			}
		})
	}
}

// A policy built in Go is validated by the same rules, with paths but no
// lines.
func TestValidateGoPolicy(t *testing.T) {
	p := &tiers.Policy{
		Rules: []tiers.Rule{
			{Name: "a", Rate: tiers.Rate{N: 10, Period: time.Second}, Burst: 5, Cost: 6},
			{Name: "b", Key: []tiers.Scope{tiers.ScopeUser, tiers.ScopeUser}, Rate: tiers.Rate{N: 1, Period: time.Second}},
			{Name: "c", Rate: tiers.Rate{Tier: true}, Key: []tiers.Scope{tiers.ScopeTenant}},
		},
	}
	want := "rules[0].cost: 6 exceeds the rule's capacity 5 (burst 5): such a request could never pass\n" +
		"rules[1].key[1]: scope \"user\" is repeated\n" +
		"rules[2].rate: \"tier\" needs default_tier, which is not set"
	err := p.Validate()
	if err == nil || err.Error() != want {
		t.Fatalf("Validate() = %v\nwant %s", err, want)
	}
	if _, err := tiers.NewLimiter(nil, p); err == nil || err.Error() != "tiers: NewLimiter: store is nil" {
		t.Errorf("NewLimiter(nil store) = %v", err)
	}
}

func TestParseRate(t *testing.T) {
	for in, want := range map[string]tiers.Rate{
		"5/1m":     {N: 5, Period: time.Minute},
		"100/1h":   {N: 100, Period: time.Hour},
		"10/500ms": {N: 10, Period: 500 * time.Millisecond},
		"tier":     {Tier: true},
	} {
		got, err := tiers.ParseRate(in)
		if err != nil || got != want {
			t.Errorf("ParseRate(%q) = %+v, %v; want %+v", in, got, err, want)
		}
		if s := got.String(); s != in {
			t.Errorf("Rate.String() = %q, want %q", s, in)
		}
	}
	for _, bad := range []struct{ in, want string }{
		{"", "(10/1s, 100/1h, 1000/1d) or tier"}, {"5", "(10/1s, 100/1h, 1000/1d) or tier"}, {"/1s", "or tier"}, {"5/", "or tier"},
		{"-5/1s", "or tier"}, {"+5/1s", "or tier"}, {"5 /1s", "or tier"}, {"Tier", "or tier"},
		{"99999999999999999999/1s", "99999999999999999999 is not a 64-bit count"},
		{"5/minute", "(write 5/1m)"}, {"5/Minutes", "(write 5/1m)"}, {"5/sec", "(write 5/1s)"}, {"10/hour", "(write 10/1h)"},
		{"10/days", "(write 10/1d for a rolling day, or 10/day for calendar days)"}, {"3/weeks", "(write 3/1w for a rolling week, or 3/week"},
		{"5/fortnight", "(the duration is 500ms, 10s, 1m, 1h, 1d or 1w; day, week, month or year"},
		{"5/1.5d", "the duration is"}, {"5/d", "the duration is"}, {"5/99999999999d", "the duration is"},
	} {
		_, err := tiers.ParseRate(bad.in)
		if err == nil || !strings.HasPrefix(err.Error(), `"`+bad.in+`" is not N/duration`) || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("ParseRate(%q) error = %v, want it to say %q", bad.in, err, bad.want)
		}
	}
	// Whole days and weeks are rolling periods of 24 and 168 hours.
	for in, want := range map[string]time.Duration{"1000/1d": 24 * time.Hour, "5/7d": 7 * 24 * time.Hour, "9/2w": 14 * 24 * time.Hour} {
		if got, err := tiers.ParseRate(in); err != nil || got.Period != want || got.Calendar != tiers.NoCalendar {
			t.Errorf("ParseRate(%q) = %+v, %v; want a rolling period of %s", in, got, err, want)
		}
	}
}

// A file with the stages' sections loaded through tiers alone is refused,
// each section at its line, naming package policyfile: the sections are
// never dropped unseen.
func TestLoadRefusesStageSections(t *testing.T) {
	_, err := tiers.Load([]byte("rules: []\nshedder:\n  capacity: 10\nconcurrency: {global: 5}\n"))
	want := "shedder: the load shedder's settings are read by package policyfile, which applies them to the load shedder: load the file with policyfile.Load or policyfile.Watch, at line 2\n" +
		"concurrency: the concurrency limiter's settings are read by package policyfile, which applies them to the concurrency limiter: load the file with policyfile.Load or policyfile.Watch, at line 4"
	if err == nil || err.Error() != want {
		t.Fatalf("Load:\n got %v\nwant %s", err, want)
	}
}
