package tiers_test

import (
	"context"
	"strings"
	"testing"

	"github.com/floodgate-go/floodgate/quota"
	"github.com/floodgate-go/floodgate/tiers"
	"github.com/floodgate-go/floodgate/tiers/memstore"
)

const quotaPolicy = `
rules:
  - {name: per-tenant, key: [tenant], rate: 100/1s, algorithm: token_bucket}
  - {name: per-route, key: [tenant, header:x-route], rate: 10/1s, algorithm: gcra}
  - {name: fixed, key: [user], rate: 10/1s, algorithm: fixed_window}
rls:
  - domain: edge
    quota: true
    descriptors:
      - entries: [{key: tenant, as: tenant}]
        rule: per-tenant
      - entries: [{key: tenant, as: tenant}, {key: route, as: "header:x-route"}]
        rule: per-route
      - entries: [{key: tenant, value: blocked}, {key: route, value: /x}]
        deny: {window: 1s}
        name: blocked
      - entries: [{key: health, value: "yes"}]
        unlimited: true
  - domain: rls-only
    descriptors:
      - entries: [{key: user, as: user}]
        rule: fixed
`

// A bucket id resolves to the buckets a ShouldRateLimit descriptor with
// the same entries charges, whatever the order of the map's keys.
func TestQuotaBucketsSameBucketsAsDescriptors(t *testing.T) {
	p, err := tiers.Load([]byte(quotaPolicy))
	if err != nil {
		t.Fatal(err)
	}
	ms, _ := memstore.New()
	l, err := tiers.NewLimiter(ms, p)
	if err != nil {
		t.Fatal(err)
	}
	qt, err := l.QuotaBuckets(nil, "edge", map[string]string{"route": "/a", "tenant": "acme"})
	if err != nil || qt.Match != tiers.DescriptorLimited || len(qt.Buckets) != 1 {
		t.Fatalf("QuotaBuckets = %+v, %v; want one limited bucket", qt, err)
	}
	b := qt.Buckets[0]
	if b.Limit.Algorithm != quota.GCRA || b.Rule != "per-route" {
		t.Fatalf("bucket %+v: want per-route's gcra", b)
	}
	// A call of ShouldRateLimit's path charges that very key.
	out := make([]tiers.DescriptorDecision, 1)
	ds := []tiers.Descriptor{{Entries: []tiers.DescriptorEntry{{Key: "tenant", Value: "acme"}, {Key: "route", Value: "/a"}}, Cost: 7}}
	if _, err := l.AdmitDescriptors(context.Background(), "edge", ds, out); err != nil {
		t.Fatal(err)
	}
	res := make([]quota.Result, 1)
	b.Cost = 0
	if _, err := ms.Take(context.Background(), []quota.Bucket{b}, res); err != nil {
		t.Fatal(err)
	}
	if res[0].Remaining != 3 {
		t.Fatalf("remaining at the RLQS bucket's key %d, want 10-7 = 3: not the descriptor's bucket", res[0].Remaining)
	}

	for _, c := range []struct {
		id    map[string]string
		match tiers.DescriptorMatch
		deny  bool
	}{
		{map[string]string{"tenant": "blocked", "route": "/x"}, tiers.DescriptorLimited, true},
		{map[string]string{"health": "yes"}, tiers.DescriptorUnlimited, false},
		{map[string]string{"nobody": "x"}, tiers.DescriptorUnknown, false},
	} {
		qt, err := l.QuotaBuckets(nil, "edge", c.id)
		if err != nil || qt.Match != c.match || qt.Deny != c.deny || len(qt.Buckets) != 0 {
			t.Errorf("QuotaBuckets(%v) = %+v, %v; want match %v deny %v, no buckets", c.id, qt, err, c.match, c.deny)
		}
	}
	for _, c := range []struct {
		domain string
		id     map[string]string
		want   string
	}{
		{"rls-only", map[string]string{"user": "u"}, `domain "rls-only" is not an rls: domain with quota: true`},
		{"edge", nil, "bucket id is empty"},
	} {
		if _, err := l.QuotaBuckets(nil, c.domain, c.id); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("QuotaBuckets(%q, %v) error %v, want %q", c.domain, c.id, err, c.want)
		}
	}
}

// A quota domain is checked at load, each error on its line.
func TestQuotaDomainChecks(t *testing.T) {
	const bad = `
rules:
  - {name: tb, key: [tenant], rate: 10/1s, algorithm: token_bucket}
  - {name: fw, key: [user], rate: 10/1s, algorithm: fixed_window}
rls:
  - domain: edge
    quota: true
    descriptors:
      - entries: [{key: a, as: tenant}, {key: b, value: x}]
        rule: tb
      - entries: [{key: b, value: y}, {key: a, as: tenant}]
        rule: tb
      - entries: [{key: u, as: user}]
        rule: fw
      - entries: [{key: a, value: "1"}, {key: a, as: tenant}]
        rule: tb
`
	_, err := tiers.Load([]byte(bad))
	if err == nil {
		t.Fatal("policy loaded; want three errors")
	}
	for _, want := range []string{
		`rls[0].descriptors[1].entries: keys ["b" "a"] in another order than rls[0].descriptors[0]'s ["a" "b"]: with quota: true a bucket id is a map, which has no order; list them alike, at line 11`,
		`rls[0].descriptors[2].rule: rule "fw" is fixed_window: with quota: true a bucket is charged after the fact, which takes token_bucket or gcra, at line 14`,
		`rls[0].descriptors[3].entries: key "a" twice: with quota: true a bucket id is a map, which has one value a key, at line 15`,
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error\n%v\nlacks %q", err, want)
		}
	}
}
