package main

import (
	extrlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// diffConfig is one envoyproxy/ratelimit configuration of the
// differential test: one or more files (two with the same domain are
// merged by envoyproxy/ratelimit's MERGE_DOMAIN_CONFIG) and the
// translate options floodgate-rls's policy is made with.
type diffConfig struct {
	name  string
	files []diffFile
	// as maps descriptor keys to floodgate scopes (translate's -as).
	as map[string]string
	// ignoreMetrics drops detailed_metric and value_to_metric
	// (translate's -ignore-metric-options), which only shape
	// envoyproxy/ratelimit's statistics.
	ignoreMetrics bool
}

type diffFile struct{ name, yaml string }

// diffSeq is one sequence of calls, sent in order to both services.
type diffSeq struct {
	name  string
	calls []*rlsv3.RateLimitRequest
}

// The configurations: every feature of envoyproxy/ratelimit's
// configuration the brief of the test names, with limits small enough
// that a few calls reach them, in units of a minute or more (a sequence
// never crosses a window: see alignWindow).
var diffConfigs = []diffConfig{
	{name: "nested", as: map[string]string{"user": "user", "tenant": "tenant"}, files: []diffFile{{"shop.yaml", `domain: shop
descriptors:
  - key: remote_address
    rate_limit: {unit: minute, requests_per_unit: 6}
  - key: generic_key
    value: checkout
    descriptors:
      - key: user
        rate_limit: {unit: minute, requests_per_unit: 4}
      - key: user
        value: vip
        rate_limit: {unit: minute, requests_per_unit: 8, name: checkout-vip}
  - key: tenant
    rate_limit: {unit: hour, requests_per_unit: 5}
    descriptors:
      - key: route
        rate_limit: {unit: minute, requests_per_unit: 3}
  - key: generic_key
    value: static
`}}},
	{name: "flags", files: []diffFile{{"edge.yaml", `domain: edge
descriptors:
  - key: remote_address
    rate_limit: {unit: minute, requests_per_unit: 5, name: per-client}
  - key: generic_key
    value: partner
    descriptors:
      - key: remote_address
        rate_limit:
          unit: minute
          requests_per_unit: 8
          name: partner
          replaces: [{name: per-client}]
  - key: generic_key
    value: health
    rate_limit: {unlimited: true}
  - key: path
    value: /beta
    shadow_mode: true
    rate_limit: {unit: minute, requests_per_unit: 2}
  - key: plan
    shadow_mode: true
    rate_limit: {unit: hour, requests_per_unit: 3}
`}}},
	{name: "wildcard", files: []diffFile{{"files.yaml", `domain: files
descriptors:
  - key: path
    value: /api/*
    rate_limit: {unit: minute, requests_per_unit: 3}
  - key: path
    value: /api/admin
    rate_limit: {unit: minute, requests_per_unit: 1}
  - key: path
    rate_limit: {unit: minute, requests_per_unit: 10}
  - key: bucket
    value: media
    descriptors:
      - key: object
        value: img-*
        rate_limit: {unit: hour, requests_per_unit: 2}
`}}},
	{name: "share_threshold", as: map[string]string{"tenant": "tenant"}, files: []diffFile{{"downloads.yaml", `domain: downloads
descriptors:
  - key: file
    value: reports/*
    share_threshold: true
    rate_limit: {unit: minute, requests_per_unit: 3}
  - key: file
    value: reports/annual
    rate_limit: {unit: minute, requests_per_unit: 1}
  - key: tenant
    value: t-*
    share_threshold: true
    descriptors:
      - key: file
        rate_limit: {unit: hour, requests_per_unit: 4}
`}}},
	{name: "requests_per_unit 0", files: []diffFile{{"blocked.yaml", `domain: blocked
descriptors:
  - key: remote_address
    value: 203.0.113.66
    rate_limit: {unit: minute, requests_per_unit: 0, name: banned}
  - key: remote_address
    rate_limit: {unit: minute, requests_per_unit: 100}
`}}},
	{name: "detailed_metric", ignoreMetrics: true, files: []diffFile{{"reports.yaml", `domain: reports
descriptors:
  - key: report
    detailed_metric: true
    rate_limit: {unit: minute, requests_per_unit: 2}
  - key: export
    value_to_metric: true
    descriptors:
      - key: format
        value: csv
        rate_limit: {unit: minute, requests_per_unit: 3}
`}}},
	{name: "merged domain", as: map[string]string{"api_key": "api_key"}, files: []diffFile{
		{"api-keys.yaml", `domain: api
descriptors:
  - key: api_key
    rate_limit: {unit: minute, requests_per_unit: 4}
`},
		{"api-routes.yaml", `domain: api
descriptors:
  - key: route
    value: /search
    rate_limit: {unit: minute, requests_per_unit: 2}
`}}},
}

// dsc is a descriptor of key, value pairs.
func dsc(kv ...string) *extrlsv3.RateLimitDescriptor { return desc(kv...) }

// dh is a descriptor with its own hits_addend.
func dh(hits uint64, kv ...string) *extrlsv3.RateLimitDescriptor {
	d := desc(kv...)
	d.HitsAddend = wrapperspb.UInt64(hits)
	return d
}

// dl is a descriptor with its own limit (an override Envoy sends from
// the route's limit action).
func dl(rpu uint32, unit typev3.RateLimitUnit, kv ...string) *extrlsv3.RateLimitDescriptor {
	d := desc(kv...)
	d.Limit = &extrlsv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: rpu, Unit: unit}
	return d
}

// call is one ShouldRateLimit request (hits 0: the default, 1).
func call(domain string, hits uint32, ds ...*extrlsv3.RateLimitDescriptor) *rlsv3.RateLimitRequest {
	return &rlsv3.RateLimitRequest{Domain: domain, HitsAddend: hits, Descriptors: ds}
}

// times repeats a call n times.
func times(n int, c *rlsv3.RateLimitRequest) []*rlsv3.RateLimitRequest {
	out := make([]*rlsv3.RateLimitRequest, n)
	for i := range out {
		out[i] = c
	}
	return out
}

func seq(name string, parts ...[]*rlsv3.RateLimitRequest) diffSeq {
	s := diffSeq{name: name}
	for _, p := range parts {
		s.calls = append(s.calls, p...)
	}
	return s
}

func one(c *rlsv3.RateLimitRequest) []*rlsv3.RateLimitRequest { return []*rlsv3.RateLimitRequest{c} }

// diffSeqs are the call sequences, in the manner of envoyproxy/ratelimit's
// integration tests: repeated hits to and past a limit, hits_addend (the
// call's and a descriptor's own), several descriptors per call, and a
// descriptor's own limit. Every sequence uses values of its own, so no
// two share a counter.
var diffSeqs = []diffSeq{
	seq("past a limit",
		times(8, call("shop", 0, dsc("remote_address", "192.0.2.10")))),
	seq("call hits_addend",
		times(3, call("shop", 2, dsc("generic_key", "checkout", "user", "alice"))),
		one(call("shop", 0, dh(0, "generic_key", "checkout", "user", "alice")))),
	seq("named nested value",
		times(3, call("shop", 3, dsc("generic_key", "checkout", "user", "vip")))),
	seq("several descriptors, one over",
		times(5, call("shop", 0, dsc("tenant", "acme"), dsc("tenant", "acme", "route", "/cart"))),
		times(2, call("shop", 0, dsc("tenant", "acme")))),
	seq("descriptor hits_addend",
		times(2, call("shop", 2, dh(3, "remote_address", "192.0.2.20"), dsc("generic_key", "checkout", "user", "bob"))),
		one(call("shop", 0, dh(0, "remote_address", "192.0.2.20"), dh(0, "generic_key", "checkout", "user", "bob"))),
		one(call("shop", 0, dsc("remote_address", "192.0.2.20")))),
	seq("not limited",
		one(call("shop", 0, dsc("generic_key", "checkout"))),
		one(call("shop", 0, dsc("unknown", "x"))),
		one(call("shop", 0, dsc("generic_key", "checkout", "user", "carol", "extra", "1"))),
		one(call("nowhere", 0, dsc("remote_address", "192.0.2.11"))),
		times(2, call("shop", 0, dsc("generic_key", "static")))),
	seq("empty value",
		times(5, call("shop", 0, dsc("generic_key", "checkout", "user", ""))),
		times(7, call("shop", 0, dsc("remote_address", "")))),
	seq("limit override",
		times(3, call("shop", 0, dl(2, typev3.RateLimitUnit_MINUTE, "remote_address", "192.0.2.30"))),
		one(call("shop", 0, dsc("remote_address", "192.0.2.30")))),
	seq("replaces",
		times(9, call("edge", 0, dsc("remote_address", "192.0.2.40"), dsc("generic_key", "partner", "remote_address", "192.0.2.40"))),
		times(3, call("edge", 0, dsc("remote_address", "192.0.2.40")))),
	seq("shadow_mode",
		times(4, call("edge", 0, dsc("path", "/beta"))),
		times(4, call("edge", 0, dsc("plan", "free")))),
	seq("shadow_mode beside a deny",
		times(6, call("edge", 0, dsc("plan", "pro"), dsc("remote_address", "192.0.2.41"))),
		times(2, call("edge", 0, dsc("plan", "pro")))),
	seq("unlimited",
		times(3, call("edge", 0, dsc("generic_key", "health"))),
		times(6, call("edge", 0, dsc("generic_key", "health"), dsc("remote_address", "192.0.2.42")))),
	seq("wildcard",
		times(4, call("files", 0, dsc("path", "/api/a"))),
		times(2, call("files", 0, dsc("path", "/api/b"))),
		times(2, call("files", 0, dsc("path", "/api/admin"))),
		times(2, call("files", 0, dsc("path", "/static"))),
		times(3, call("files", 0, dsc("bucket", "media", "object", "img-1"))),
		one(call("files", 0, dsc("bucket", "media", "object", "img-2"))),
		one(call("files", 0, dsc("bucket", "media", "object", "doc-1")))),
	seq("share_threshold",
		times(2, call("downloads", 0, dsc("file", "reports/a"))),
		times(2, call("downloads", 0, dsc("file", "reports/b"))),
		times(2, call("downloads", 0, dsc("file", "reports/annual"))),
		times(3, call("downloads", 0, dsc("tenant", "t-1", "file", "x"))),
		times(2, call("downloads", 0, dsc("tenant", "t-2", "file", "x")))),
	seq("requests_per_unit 0",
		times(2, call("blocked", 0, dsc("remote_address", "203.0.113.66"))),
		one(call("blocked", 0, dh(0, "remote_address", "203.0.113.66"))),
		times(2, call("blocked", 0, dsc("remote_address", "203.0.113.67"))),
		times(2, call("blocked", 0, dsc("remote_address", "203.0.113.66"), dsc("remote_address", "203.0.113.67"))),
		one(call("blocked", 0, dsc("remote_address", "203.0.113.67")))),
	seq("detailed_metric",
		times(3, call("reports", 0, dsc("report", "r1"))),
		one(call("reports", 0, dsc("report", "r2"))),
		times(4, call("reports", 0, dsc("export", "e1", "format", "csv"))),
		one(call("reports", 0, dsc("export", "e2", "format", "csv")))),
	seq("merged domain",
		times(5, call("api", 0, dsc("api_key", "k1"))),
		times(3, call("api", 0, dsc("route", "/search"))),
		times(2, call("api", 0, dsc("api_key", "k2"), dsc("route", "/search")))),
	seq("several domains",
		times(3, call("shop", 0, dsc("remote_address", "192.0.2.50"))),
		times(3, call("edge", 0, dsc("remote_address", "192.0.2.50"))),
		times(2, call("shop", 0, dsc("remote_address", "192.0.2.50"))),
		times(3, call("edge", 0, dsc("remote_address", "192.0.2.50")))),
}
