package translate_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate/rls/translate"
	"github.com/floodgate-go/floodgate/tiers"
	"github.com/floodgate-go/floodgate/tiers/memstore"
)

// admitTranslated translates cfg and decides one call of descriptors (each a
// list of key, value pairs) n times; it returns how many were denied.
func admitTranslated(t *testing.T, cfg string, n int, descs ...[]string) int {
	t.Helper()
	out, err := translate.Translate([]translate.File{{Name: "c.yaml", Data: []byte(cfg)}}, translate.Options{})
	if err != nil {
		t.Fatalf("translate: %v", err)
	}
	t.Logf("translation:\n%s", out)
	p, err := tiers.Load(out)
	if err != nil {
		t.Fatal(err)
	}
	store, err := memstore.New()
	if err != nil {
		t.Fatal(err)
	}
	l, err := tiers.NewLimiter(store, p)
	if err != nil {
		t.Fatal(err)
	}
	denied := 0
	for range n {
		ds := make([]tiers.Descriptor, len(descs))
		for i, kv := range descs {
			for j := 0; j+1 < len(kv); j += 2 {
				ds[i].Entries = append(ds[i].Entries, tiers.DescriptorEntry{Key: kv[j], Value: kv[j+1]})
			}
		}
		outd := make([]tiers.DescriptorDecision, len(ds))
		d, err := l.AdmitDescriptors(context.Background(), "edge", ds, outd)
		if err != nil {
			t.Fatal(err)
		}
		if !d.Allowed {
			denied++
		}
	}
	return denied
}

// In envoyproxy/ratelimit a descriptor with a value and no rate_limit
// (and no children) matches its value and sets no limit: that value is
// not limited, whatever its key's any-value sibling says (GetLimit finds
// "remote_address_10.0.0.1" and never falls back to "remote_address"), and
// so does the translation (it dropped the descriptor, and the sibling
// limited the value).
func TestValueWithoutRateLimitIsUnlimited(t *testing.T) {
	cfg := `
domain: edge
descriptors:
  - key: remote_address
    rate_limit: {unit: minute, requests_per_unit: 2}
  - key: remote_address
    value: 10.0.0.1
`
	if denied := admitTranslated(t, cfg, 5, []string{"remote_address", "10.0.0.1"}); denied != 0 {
		t.Fatalf("remote_address=10.0.0.1: %d of 5 calls denied; envoyproxy/ratelimit sets no limit for it", denied)
	}
}

// Envoy's masked_remote_address action sends a network
// ("192.0.2.0/24" with v4_prefix_mask_len: 24); envoyproxy/ratelimit
// counts each value, and so does the translation (it keyed ip with the
// default /32 prefix, so a /24 value keyed nothing and was never limited).
func TestMaskedRemoteAddressCountedPerValue(t *testing.T) {
	cfg := `
domain: edge
descriptors:
  - key: masked_remote_address
    rate_limit: {unit: minute, requests_per_unit: 2}
`
	if denied := admitTranslated(t, cfg, 5, []string{"masked_remote_address", "192.0.2.0/24"}); denied != 3 {
		t.Fatalf("masked_remote_address=192.0.2.0/24: %d of 5 calls denied at 2/minute, want 3", denied)
	}
}

// limiterFor serves the translation of files.
func limiterFor(t *testing.T, files []translate.File, opts translate.Options) *tiers.Limiter {
	t.Helper()
	out, err := translate.Translate(files, opts)
	if err != nil {
		t.Fatalf("translate: %v", err)
	}
	t.Logf("translation:\n%s", out)
	p, err := tiers.Load(out)
	if err != nil {
		t.Fatal(err)
	}
	store, err := memstore.New()
	if err != nil {
		t.Fatal(err)
	}
	l, err := tiers.NewLimiter(store, p)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// decide decides one call of descriptors (each a list of key, value
// pairs) in domain.
func decide(t *testing.T, l *tiers.Limiter, domain string, descs ...[]string) (bool, []tiers.DescriptorDecision) {
	t.Helper()
	ds := make([]tiers.Descriptor, len(descs))
	for i, kv := range descs {
		for j := 0; j+1 < len(kv); j += 2 {
			ds[i].Entries = append(ds[i].Entries, tiers.DescriptorEntry{Key: kv[j], Value: kv[j+1]})
		}
	}
	out := make([]tiers.DescriptorDecision, len(ds))
	d, err := l.AdmitDescriptors(context.Background(), domain, ds, out)
	if err != nil {
		t.Fatal(err)
	}
	return d.Allowed, out
}

// A wildcard value matches every value with its prefix, as
// envoyproxy/ratelimit matches "path_/api/*"; without share_threshold
// each value has its own counter (its cache key holds the value), with
// it every value shares one (its cache key holds the pattern). A fixed
// value is preferred to the wildcard.
func TestWildcardValues(t *testing.T) {
	cfg := `
domain: edge
descriptors:
  - key: path
    value: /api/*
    rate_limit: {unit: minute, requests_per_unit: 2}
  - key: path
    value: /api/health
  - key: path
    value: /shared/*
    share_threshold: true
    rate_limit: {unit: minute, requests_per_unit: 2}
`
	l := limiterFor(t, []translate.File{{Name: "c.yaml", Data: []byte(cfg)}}, translate.Options{})
	want := func(allowed bool, path string) {
		t.Helper()
		if got, out := decide(t, l, "edge", []string{"path", path}); got != allowed {
			t.Fatalf("path=%s: allowed %v, want %v (%+v)", path, got, allowed, out[0])
		}
	}
	want(true, "/api/a")
	want(true, "/api/a")
	want(false, "/api/a")
	want(true, "/api/b") // a counter of its own
	want(true, "/api/")  // the prefix itself matches
	for range 5 {
		want(true, "/api/health") // the fixed value: no limit
		want(true, "/other")      // no match
	}
	want(true, "/shared/a")
	want(true, "/shared/b")
	want(false, "/shared/c") // one counter for every value
	want(false, "/shared/a")
}

// requests_per_unit: 0 always denies (limitAfterIncrease > 0), charging
// nothing elsewhere in the call here; hits_addend 0 is within it
// (0 > 0 is false); in shadow_mode it denies nothing.
func TestRequestsPerUnitZero(t *testing.T) {
	cfg := `
domain: edge
descriptors:
  - key: generic_key
    value: blocked
    rate_limit: {unit: minute, requests_per_unit: 0}
  - key: generic_key
    value: watched
    shadow_mode: true
    rate_limit: {unit: minute, requests_per_unit: 0}
  - key: remote_address
    rate_limit: {unit: minute, requests_per_unit: 2}
`
	l := limiterFor(t, []translate.File{{Name: "c.yaml", Data: []byte(cfg)}}, translate.Options{})
	for range 3 {
		allowed, out := decide(t, l, "edge", []string{"generic_key", "blocked"}, []string{"remote_address", "192.0.2.1"})
		if allowed || out[0].Decision.Allowed || out[0].Name != "edge.generic_key_blocked" || out[0].Bucket.Period != time.Minute {
			t.Fatalf("blocked: allowed %v, %+v", allowed, out[0])
		}
	}
	for range 2 {
		if allowed, out := decide(t, l, "edge", []string{"generic_key", "watched"}, []string{"remote_address", "192.0.2.1"}); !allowed || !out[0].Decision.Shadow {
			t.Fatalf("watched (shadow): allowed %v, %+v", allowed, out[0])
		}
	}
	if allowed, _ := decide(t, l, "edge", []string{"remote_address", "192.0.2.1"}); allowed {
		t.Fatal("remote_address: allowed a third call; the denied calls charged it")
	}
}

// A domain given in several files is merged with MergeDomains
// (MERGE_DOMAIN_CONFIG), refused without; a descriptor listed at the top
// of the domain in two files is refused either way.
func TestMergeDomains(t *testing.T) {
	a := translate.File{Name: "a.yaml", Data: []byte("domain: edge\ndescriptors:\n  - key: remote_address\n    rate_limit: {unit: minute, requests_per_unit: 1}\n")}
	b := translate.File{Name: "b.yaml", Data: []byte("domain: edge\ndescriptors:\n  - key: tenant\n    rate_limit: {unit: minute, requests_per_unit: 1}\n")}
	if _, err := translate.Translate([]translate.File{a, b}, translate.Options{}); err == nil || !strings.Contains(err.Error(), "-merge-domains") {
		t.Fatalf("without MergeDomains: %v", err)
	}
	l := limiterFor(t, []translate.File{a, b}, translate.Options{MergeDomains: true})
	for _, kv := range [][]string{{"remote_address", "192.0.2.1"}, {"tenant", "acme"}} {
		if allowed, _ := decide(t, l, "edge", kv); !allowed {
			t.Fatalf("%v: first call denied", kv)
		}
		if allowed, _ := decide(t, l, "edge", kv); allowed {
			t.Fatalf("%v: second call allowed: the file's limit is not in force", kv)
		}
	}
	c := translate.File{Name: "c.yaml", Data: a.Data}
	if _, err := translate.Translate([]translate.File{a, c}, translate.Options{MergeDomains: true}); err == nil || !strings.Contains(err.Error(), "c.yaml:3: descriptors[0]: the same key and value as the descriptor at a.yaml:3") {
		t.Fatalf("a descriptor in two merged files: %v", err)
	}
}

// detailed_metric is accepted, with a warning that says what floodgate
// reports instead.
func TestDetailedMetricWarns(t *testing.T) {
	in := "domain: d\ndescriptors:\n  - key: client\n    detailed_metric: true\n    rate_limit: {unit: second, requests_per_unit: 5}\n"
	out, err := translate.Translate([]translate.File{{Name: "c.yaml", Data: []byte(in)}}, translate.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(out), translate.WarningPrefix+"c.yaml:4: descriptors[0].detailed_metric: detailed_metric only names envoyproxy/ratelimit's statistics after descriptor values; floodgate counts decisions per rule (floodgate.decisions by floodgate.policy") {
		t.Fatalf("no warning:\n%s", out)
	}
}
