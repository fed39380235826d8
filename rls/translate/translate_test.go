package translate_test

import (
	"context"
	"flag"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	extrlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/floodgate-go/floodgate/quota"
	"github.com/floodgate-go/floodgate/rls"
	"github.com/floodgate-go/floodgate/rls/translate"
	"github.com/floodgate-go/floodgate/testing/clock"
	"github.com/floodgate-go/floodgate/tiers"
	"github.com/floodgate-go/floodgate/tiers/memstore"
)

var update = flag.Bool("update", false, "rewrite the golden files")

func read(t *testing.T, names ...string) []translate.File {
	t.Helper()
	var out []translate.File
	for _, n := range names {
		b, err := os.ReadFile(filepath.Join("testdata", n))
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, translate.File{Name: n, Data: b})
	}
	return out
}

var edgeOpts = translate.Options{As: map[string]string{"tenant": "tenant"}}

// The translation of two configurations covering nested descriptors,
// fixed and wildcard values, shadow_mode, unlimited and replaces is the
// reviewed policy in testdata/edge.policy.yaml.
func TestTranslateGolden(t *testing.T) {
	out, err := translate.Translate(read(t, "edge.yaml", "internal.yaml"), edgeOpts)
	if err != nil {
		t.Fatal(err)
	}
	golden := filepath.Join("testdata", "edge.policy.yaml")
	if *update {
		if err := os.WriteFile(golden, out, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatal(err)
	}
	if string(out) != string(want) {
		t.Fatalf("translation differs from %s:\n%s", golden, out)
	}
}

// The translated policy, served by package rls over real gRPC, answers as
// envoyproxy/ratelimit's documentation says the configuration behaves.
func TestTranslatedPolicyServes(t *testing.T) {
	out, err := translate.Translate(read(t, "edge.yaml", "internal.yaml"), edgeOpts)
	if err != nil {
		t.Fatal(err)
	}
	p, err := tiers.Load(out)
	if err != nil {
		t.Fatal(err)
	}
	clk := clock.New(time.Time{})
	store, err := memstore.New(memstore.WithClock(clk))
	if err != nil {
		t.Fatal(err)
	}
	l, err := tiers.NewLimiter(store, p)
	if err != nil {
		t.Fatal(err)
	}
	srv, err := rls.New(l)
	if err != nil {
		t.Fatal(err)
	}
	g := grpc.NewServer()
	srv.Register(g)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = g.Serve(lis) }()
	defer g.Stop()
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	client := rlsv3.NewRateLimitServiceClient(conn)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	call := func(domain string, descs ...*extrlsv3.RateLimitDescriptor) *rlsv3.RateLimitResponse {
		t.Helper()
		resp, err := client.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: domain, Descriptors: descs})
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}
	d := func(kv ...string) *extrlsv3.RateLimitDescriptor {
		out := &extrlsv3.RateLimitDescriptor{}
		for i := 0; i+1 < len(kv); i += 2 {
			out.Entries = append(out.Entries, &extrlsv3.RateLimitDescriptor_Entry{Key: kv[i], Value: kv[i+1]})
		}
		return out
	}

	// Nested: login is 5 a minute per address, on top of 100 per address.
	for i := range 5 {
		resp := call("edge", d("remote_address", "192.0.2.1"), d("generic_key", "login", "remote_address", "192.0.2.1"))
		if resp.OverallCode != rlsv3.RateLimitResponse_OK || resp.Statuses[1].LimitRemaining != uint32(4-i) || resp.Statuses[0].CurrentLimit.GetName() != "per-client" {
			t.Fatalf("login %d: %v", i, resp)
		}
	}
	if resp := call("edge", d("remote_address", "192.0.2.1"), d("generic_key", "login", "remote_address", "192.0.2.1")); resp.OverallCode != rlsv3.RateLimitResponse_OVER_LIMIT {
		t.Fatalf("sixth login: %v", resp)
	}
	// The denied login charged nothing at per-client: 5 of 100 spent.
	if resp := call("edge", d("remote_address", "192.0.2.1")); resp.Statuses[0].LimitRemaining != 94 {
		t.Fatalf("per-client: %v", resp)
	}
	// Shadow: 10 a second per tenant and path, never denying.
	for i := range 12 {
		resp := call("edge", d("tenant", "t1", "path", "/x"))
		if resp.OverallCode != rlsv3.RateLimitResponse_OK {
			t.Fatalf("shadow %d: %v", i, resp)
		}
	}
	// Unlimited health checks; unknown keys are not limited.
	if resp := call("edge", d("generic_key", "health"), d("nope", "x")); resp.Statuses[0].LimitRemaining != 1<<32-1 || resp.Statuses[1].CurrentLimit != nil {
		t.Fatalf("health: %v", resp)
	}
	// Replaces: with the partner's descriptor, per-client is not charged.
	resp := call("edge", d("remote_address", "192.0.2.1"), d("partner", "acme"))
	if resp.Statuses[0].CurrentLimit != nil || resp.Statuses[1].CurrentLimit.GetName() != "acme" || resp.Statuses[1].LimitRemaining != 999999 {
		t.Fatalf("replaces: %v", resp)
	}
	if resp := call("edge", d("remote_address", "192.0.2.1")); resp.Statuses[0].LimitRemaining != 93 {
		t.Fatalf("per-client after the replaced call: %v", resp)
	}
	// The other domain: weekly and per-value daily limits.
	if resp := call("internal", d("database", "default"), d("message_type", "marketing", "to_number", "+15550100")); resp.Statuses[0].CurrentLimit.GetUnit() != rlsv3.RateLimitResponse_RateLimit_WEEK ||
		resp.Statuses[1].LimitRemaining != 4 {
		t.Fatalf("internal: %v", resp)
	}
}

func TestTranslateErrors(t *testing.T) {
	_, err := translate.Translate(read(t, "unsupported.yaml"), translate.Options{})
	want := []string{
		`unsupported.yaml:4: descriptors[0].value: "/api/*/items" has a '*' before its end`,
		`unsupported.yaml:9: descriptors[1].quota_mode: quota mode is not supported`,
		`unsupported.yaml:16: descriptors[2].rate_limit.unit: "fortnight" is not a unit`,
		`unsupported.yaml:20: descriptors[3].share_threshold: only a wildcard value (foo*) can share its limit`,
		`unsupported.yaml:22: descriptors[4].key: "x-forwarded-for" as header:x-forwarded-for: header "x-forwarded-for" cannot be matched or keyed on`,
		`unsupported.yaml:28: descriptors[5].bogus: unknown field`,
	}
	if err == nil {
		t.Fatal("no error")
	}
	lines := strings.Split(err.Error(), "\n")
	if len(lines) != len(want) {
		t.Fatalf("%d errors, want %d:\n%v", len(lines), len(want), err)
	}
	for i, w := range want {
		if !strings.HasPrefix(lines[i], w) {
			t.Errorf("error %d:\n  %s\nwant prefix\n  %s", i, lines[i], w)
		}
	}

	cases := []struct {
		name, in string
		opts     translate.Options
		want     string
	}{
		{"collision", "domain: d\ndescriptors:\n  - key: a b\n    rate_limit: {unit: second, requests_per_unit: 1}\n  - key: a_b\n    rate_limit: {unit: second, requests_per_unit: 1}\n",
			translate.Options{As: map[string]string{"a b": "user", "a_b": "tenant"}}, `c.yaml:6: descriptors[1].rate_limit: its rule name "d.a_b" is already the name of c.yaml:4`},
		{"no domain", "descriptors: []\n", translate.Options{}, "c.yaml:1: domain: required"},
		{"unlimited with unit", "domain: d\ndescriptors:\n  - key: k\n    value: v\n    rate_limit: {unlimited: true, unit: second}\n", translate.Options{}, "c.yaml:5: descriptors[0].rate_limit: unlimited takes no unit"},
		{"bad as", "domain: d\ndescriptors: []\n", translate.Options{As: map[string]string{"k": "ipp"}}, "-as: k=ipp: want ip, user"},
		{"two keys one scope", "domain: d\ndescriptors:\n  - key: a\n    descriptors:\n      - key: b\n        rate_limit: {unit: second, requests_per_unit: 1}\n",
			translate.Options{As: map[string]string{"a": "user", "b": "user"}}, `c.yaml:5: descriptors[0].descriptors[0].key: descriptor keys "a" and "b" both fill user`},
		{"missing requests", "domain: d\ndescriptors:\n  - key: k\n    value: v\n    rate_limit: {unit: second}\n", translate.Options{}, "descriptors[0].rate_limit.requests_per_unit: required"},
		{"replaces itself", "domain: d\ndescriptors:\n  - key: k\n    value: v\n    rate_limit: {name: n, unit: second, requests_per_unit: 1, replaces: [{name: n}]}\n", translate.Options{}, "a limit cannot replace itself"},
		{"share_threshold", "domain: d\ndescriptors:\n  - key: k\n    value: v\n    share_threshold: true\n", translate.Options{}, "c.yaml:5: descriptors[0].share_threshold: only a wildcard value"},
		{"unknown field", "domain: d\nx: &a 1\n", translate.Options{}, "c.yaml:2: x: unknown field"},
		{"duplicate", "domain: d\ndescriptors:\n  - key: k\n    value: v\n    rate_limit: {unlimited: true}\n  - key: k\n    value: v\n    rate_limit: {unlimited: true}\n",
			translate.Options{}, "c.yaml:6: descriptors[1]: the same key and value as the descriptor at line 3"},
	}
	for _, c := range cases {
		_, err := translate.Translate([]translate.File{{Name: "c.yaml", Data: []byte(c.in)}}, c.opts)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want %q", c.name, err, c.want)
		}
	}
	// A domain given twice, in two files.
	f := translate.File{Name: "a.yaml", Data: []byte("domain: d\ndescriptors: []\n")}
	g := translate.File{Name: "b.yaml", Data: []byte("domain: d\ndescriptors: []\n")}
	if _, err := translate.Translate([]translate.File{f, g}, translate.Options{}); err == nil || !strings.Contains(err.Error(), `b.yaml:1: domain: "d" is already the domain of a.yaml:1`) {
		t.Errorf("duplicate domain: %v", err)
	}
}

// The statistics-only options are dropped when asked, and the output
// says so.
func TestIgnoreMetricOptions(t *testing.T) {
	in := "domain: d\ndescriptors:\n  - key: client\n    detailed_metric: true\n    rate_limit: {unit: second, requests_per_unit: 5}\n"
	out, err := translate.Translate([]translate.File{{Name: "c.yaml", Data: []byte(in)}}, translate.Options{IgnoreMetricOptions: true})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(out), "# Dropped (statistics only): c.yaml:4 descriptors[0].detailed_metric") {
		t.Fatalf("output does not say what it dropped:\n%s", out)
	}
}

// With a local-first consistency every rule has it and a token bucket of
// the same rate (the modes need one), the output says so, and the policy
// loads; exact is the default and writes nothing new; anything else is an
// error naming the option.
func TestTranslateConsistency(t *testing.T) {
	in := "domain: d\ndescriptors:\n  - key: client\n    rate_limit: {unit: minute, requests_per_unit: 60}\n  - key: tenant\n    descriptors:\n      - key: user\n        rate_limit: {unit: second, requests_per_unit: 5}\n"
	files := []translate.File{{Name: "c.yaml", Data: []byte(in)}}
	for _, mode := range []string{"leased", "async"} {
		out, err := translate.Translate(files, translate.Options{Consistency: mode})
		if err != nil {
			t.Fatalf("%s: %v", mode, err)
		}
		p, err := tiers.Load(out)
		if err != nil {
			t.Fatalf("%s: the translation does not load: %v\n%s", mode, err, out)
		}
		if len(p.Rules) != 2 {
			t.Fatalf("%s: %d rules, want 2", mode, len(p.Rules))
		}
		for _, r := range p.Rules {
			if r.Consistency.String() != mode || r.Algorithm != quota.TokenBucket {
				t.Fatalf("%s: rule %s has consistency %s and algorithm %v", mode, r.Name, r.Consistency, r.Algorithm)
			}
		}
		if r := p.Rules[0]; r.Rate.N != 60 || r.Rate.Period != time.Minute || r.Burst != 0 {
			t.Fatalf("%s: rule %s has rate %v burst %d, want 60/1m with the default burst (60)", mode, r.Name, r.Rate, r.Burst)
		}
		if !strings.Contains(string(out), "# consistency "+mode+": every rule is decided locally") {
			t.Fatalf("%s: the output does not say what changed:\n%s", mode, out)
		}
	}
	exact, err := translate.Translate(files, translate.Options{Consistency: "exact"})
	if err != nil {
		t.Fatal(err)
	}
	def, err := translate.Translate(files, translate.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if string(exact) != string(def) || strings.Contains(string(def), "consistency") {
		t.Fatalf("exact differs from the default or names a consistency:\n%s\n--\n%s", exact, def)
	}
	if _, err := translate.Translate(files, translate.Options{Consistency: "eventual"}); err == nil || !strings.Contains(err.Error(), `-consistency: "eventual" is not exact, leased or async`) {
		t.Fatalf("err = %v, want one naming -consistency", err)
	}
}
