package rls_test

import (
	"context"
	"errors"
	"math"
	"strings"
	"testing"
	"time"

	extrlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/floodgate-go/floodgate/quota"
	"github.com/floodgate-go/floodgate/rls"
	"github.com/floodgate-go/floodgate/testing/clock"
	"github.com/floodgate-go/floodgate/tiers"
	"github.com/floodgate-go/floodgate/tiers/localfirst"
	"github.com/floodgate-go/floodgate/tiers/memstore"
)

const (
	ok   = rlsv3.RateLimitResponse_OK
	over = rlsv3.RateLimitResponse_OVER_LIMIT
)

// policy is the policy of these tests: fixed windows, so that on the fake
// clock (which starts on a whole minute) every count and reset is exact.
const policy = `
tiers:
  free: {rate: 10/1m, algorithm: fixed_window}
  pro:  {rate: 100/1m, algorithm: fixed_window}
default_tier: free
rules:
  - {name: per-ip, key: [ip], rate: 3/1m, algorithm: fixed_window}
  - {name: per-tenant, key: [tenant], rate: tier}
  - name: login
    match: {method: /auth.v1.Auth/Login}
    key: [ip]
    rate: 2/1m
    algorithm: fixed_window
    hide_quota: true
  - {name: dry, key: [user], rate: 1/1m, algorithm: fixed_window, shadow: true}
  - {name: per-path, key: [header:x-path], rate: 20/10s, algorithm: fixed_window}
rls:
  - domain: edge
    descriptors:
      - entries: [{key: remote_address, as: ip}]
        rule: per-ip
      - entries: [{key: tenant-id, as: tenant}, {key: plan, as: tier}]
        rule: per-tenant
      - entries: [{key: tenant-id, as: tenant}]
        rule: per-tenant
      - entries: [{key: generic_key, value: login}, {key: remote_address, as: ip}]
        rule: login
        method: /auth.v1.Auth/Login
      - entries: [{key: user, as: user}]
        rule: dry
      - entries: [{key: header_match, value: api}, {key: path, as: "header:x-path"}]
        rule: per-path
      - entries: [{key: generic_key, value: health}]
        unlimited: true
`

func TestAllowedThenOverLimit(t *testing.T) {
	e := newEnv(t, policy)
	for i, want := range []uint32{2, 1, 0} {
		resp := e.call(t, "edge", 0, d("remote_address", "192.0.2.1"))
		if resp.OverallCode != ok {
			t.Fatalf("call %d: %v", i, resp)
		}
		if got := remaining(t, resp, 0, ok); got != want {
			t.Fatalf("call %d: remaining %d, want %d", i, got, want)
		}
		st := resp.Statuses[0]
		if cl := st.CurrentLimit; cl.GetName() != "per-ip" || cl.GetRequestsPerUnit() != 3 || cl.GetUnit() != rlsv3.RateLimitResponse_RateLimit_MINUTE || cl.GetUnitMultiplier() != nil {
			t.Fatalf("current_limit %v, want per-ip 3 per MINUTE", cl)
		}
		if st.DurationUntilReset.AsDuration() != time.Minute {
			t.Fatalf("duration_until_reset %v, want 1m", st.DurationUntilReset.AsDuration())
		}
		if p, r := header(resp, rls.HeaderRateLimitPolicy), header(resp, rls.HeaderRateLimit); p != `"per-ip";q=3;w=60` || r != `"per-ip";r=`+string(rune('0'+want))+`;t=60` {
			t.Fatalf("headers %q / %q", p, r)
		}
		if ra := header(resp, rls.HeaderRetryAfter); ra != "" {
			t.Fatalf("retry-after %q on an allow", ra)
		}
	}
	e.clk.Advance(15 * time.Second)
	resp := e.call(t, "edge", 0, d("remote_address", "192.0.2.1"))
	if resp.OverallCode != over || remaining(t, resp, 0, over) != 0 {
		t.Fatalf("fourth call: %v", resp)
	}
	if ra, r := header(resp, rls.HeaderRetryAfter), header(resp, rls.HeaderRateLimit); ra != "45" || r != `"per-ip";r=0;t=45` {
		t.Fatalf("deny headers: retry-after %q, ratelimit %q", ra, r)
	}
	e.clk.Advance(45 * time.Second) // the next window
	if resp := e.call(t, "edge", 0, d("remote_address", "192.0.2.1")); remaining(t, resp, 0, ok) != 2 {
		t.Fatalf("next window: %v", resp)
	}
	// Another client has a bucket of its own.
	if resp := e.call(t, "edge", 0, d("remote_address", "192.0.2.2")); remaining(t, resp, 0, ok) != 2 {
		t.Fatalf("another address: %v", resp)
	}
}

// A call denied at one descriptor charges nothing at the others: the
// tenant's count is exactly what the allowed calls charged.
func TestMixedDescriptorsDeniedChargeNothing(t *testing.T) {
	e := newEnv(t, policy)
	tenant := func() *extrlsv3.RateLimitDescriptor { return d("tenant-id", "acme") }
	for range 3 {
		if resp := e.call(t, "edge", 0, tenant(), d("remote_address", "192.0.2.1")); resp.OverallCode != ok {
			t.Fatalf("setup: %v", resp)
		}
	}
	for range 5 {
		resp := e.call(t, "edge", 0, tenant(), d("remote_address", "192.0.2.1"))
		if resp.OverallCode != over {
			t.Fatalf("want OVER_LIMIT: %v", resp)
		}
		if got := remaining(t, resp, 0, ok); got != 7 {
			t.Fatalf("tenant descriptor: remaining %d, want 7 as it stands (uncharged)", got)
		}
		remaining(t, resp, 1, over)
	}
	resp := e.call(t, "edge", 0, tenant())
	if got := remaining(t, resp, 0, ok); got != 6 {
		t.Fatalf("tenant: %d left, want 6: five denied calls charged nothing", got)
	}
}

func TestHitsAddend(t *testing.T) {
	e := newEnv(t, policy)
	ip := func() *extrlsv3.RateLimitDescriptor { return d("remote_address", "192.0.2.10") }
	// The request's hits_addend is every descriptor's cost.
	if got := remaining(t, e.call(t, "edge", 2, ip()), 0, ok); got != 1 {
		t.Fatalf("hits_addend 2: remaining %d, want 1", got)
	}
	// A descriptor's own hits_addend of 0 checks without charging.
	if got := remaining(t, e.call(t, "edge", 2, hits(ip(), 0)), 0, ok); got != 1 {
		t.Fatalf("descriptor hits_addend 0: remaining %d, want 1", got)
	}
	// A descriptor's own hits_addend overrides the request's.
	if got := remaining(t, e.call(t, "edge", 3, hits(ip(), 1)), 0, ok); got != 0 {
		t.Fatalf("descriptor hits_addend 1: remaining %d, want 0", got)
	}
	// Different costs per descriptor in one call.
	resp := e.call(t, "edge", 0, hits(d("tenant-id", "t1"), 4), d("remote_address", "192.0.2.11"))
	if remaining(t, resp, 0, ok) != 6 || remaining(t, resp, 1, ok) != 2 {
		t.Fatalf("mixed costs: %v", resp)
	}
	// More than the capacity can never pass: denied with no Retry-After,
	// and the other descriptor is not charged.
	resp = e.call(t, "edge", 0, d("tenant-id", "t1"), hits(d("remote_address", "192.0.2.12"), 4))
	if resp.OverallCode != over || header(resp, rls.HeaderRetryAfter) != "" {
		t.Fatalf("cost above capacity: %v", resp)
	}
	if got := remaining(t, e.call(t, "edge", 0, hits(d("tenant-id", "t1"), 0)), 0, ok); got != 6 {
		t.Fatalf("tenant t1: %d left, want 6", got)
	}
}

// Envoy's contract for descriptors the service has no limit for: OK, with
// no current limit, as envoyproxy/ratelimit answers. An unlimited one is
// OK with the largest remaining.
func TestUnknownAndUnlimited(t *testing.T) {
	e := newEnv(t, policy)
	for _, c := range []struct {
		domain string
		desc   *extrlsv3.RateLimitDescriptor
		rem    uint32
	}{
		{"other-domain", d("remote_address", "192.0.2.1"), 0},
		{"edge", d("remote_address", "192.0.2.1", "extra", "x"), 0},
		{"edge", d("generic_key", "nope"), 0},
		{"edge", d("generic_key", "health"), math.MaxUint32},
	} {
		resp := e.call(t, c.domain, 0, c.desc)
		st := resp.Statuses[0]
		if resp.OverallCode != ok || st.Code != ok || st.CurrentLimit != nil || st.LimitRemaining != c.rem || st.DurationUntilReset != nil || len(resp.ResponseHeadersToAdd) != 0 {
			t.Fatalf("%s %v: %v", c.domain, c.desc, resp)
		}
	}
	// Next to a limited descriptor, the limited one is decided as usual.
	resp := e.call(t, "edge", 0, d("generic_key", "nope"), d("remote_address", "192.0.2.1"))
	if resp.Statuses[0].CurrentLimit != nil || remaining(t, resp, 1, ok) != 2 {
		t.Fatalf("%v", resp)
	}
}

// A shadow rule never denies: its descriptor says OK when it would deny,
// it is charged only when it allows, and it sends no quota headers.
func TestShadow(t *testing.T) {
	e := newEnv(t, policy)
	for i := range 3 {
		resp := e.call(t, "edge", 0, d("user", "bob"), d("remote_address", "192.0.2.1"))
		if resp.OverallCode != ok || resp.Statuses[0].Code != ok {
			t.Fatalf("call %d: %v", i, resp)
		}
		if i > 0 && resp.Statuses[0].LimitRemaining != 0 {
			t.Fatalf("call %d: shadow remaining %d", i, resp.Statuses[0].LimitRemaining)
		}
		if p := header(resp, rls.HeaderRateLimitPolicy); strings.Contains(p, "dry") {
			t.Fatalf("call %d: shadow rule in %q", i, p)
		}
		if got := remaining(t, resp, 1, ok); got != uint32(2-i) {
			t.Fatalf("call %d: ip remaining %d", i, got)
		}
	}
}

// A rule that hides its quota shows neither limit nor remaining, to Envoy
// or in headers; a deny still says when to retry.
func TestHiddenQuota(t *testing.T) {
	e := newEnv(t, policy)
	login := func() *extrlsv3.RateLimitDescriptor { return d("generic_key", "login", "remote_address", "192.0.2.5") }
	for range 2 {
		resp := e.call(t, "edge", 0, login())
		if st := resp.Statuses[0]; st.Code != ok || st.CurrentLimit != nil || st.LimitRemaining != 0 || len(resp.ResponseHeadersToAdd) != 0 {
			t.Fatalf("%v", resp)
		}
	}
	resp := e.call(t, "edge", 0, login())
	if resp.OverallCode != over || resp.Statuses[0].CurrentLimit != nil || header(resp, rls.HeaderRetryAfter) != "60" || header(resp, rls.HeaderRateLimit) != "" {
		t.Fatalf("%v", resp)
	}
}

// What Envoy sends for a route with these rate_limits (one descriptor per
// action list, entries in action order, hits_addend unset):
//
//	rate_limits:
//	- actions: [{remote_address: {}}]
//	- actions: [{generic_key: {descriptor_value: login}}, {remote_address: {}}]
//	- actions:
//	  - {request_headers: {header_name: x-tenant-id, descriptor_key: tenant-id}}
//	  - {request_headers: {header_name: x-plan, descriptor_key: plan}}
//	- actions:
//	  - {header_value_match: {descriptor_value: api, headers: [{name: x-api, present_match: true}]}}
//	  - {request_headers: {header_name: ":path", descriptor_key: path}}
func TestEnvoyRequestShape(t *testing.T) {
	e := newEnv(t, policy)
	req := &rlsv3.RateLimitRequest{
		Domain: "edge",
		Descriptors: []*extrlsv3.RateLimitDescriptor{
			d("remote_address", "2001:db8::1"),
			d("generic_key", "login", "remote_address", "2001:db8::1"),
			d("tenant-id", "acme", "plan", "pro"),
			d("header_match", "api", "path", "/v1/items/42?q=a"),
		},
	}
	resp, err := e.client.ShouldRateLimit(ctxT(t), req)
	if err != nil {
		t.Fatal(err)
	}
	if resp.OverallCode != ok {
		t.Fatalf("%v", resp)
	}
	want := []struct {
		name string
		rem  uint32
		rpu  uint32
		unit rlsv3.RateLimitResponse_RateLimit_Unit
		mult uint32
	}{{"per-ip", 2, 3, rlsv3.RateLimitResponse_RateLimit_MINUTE, 0}, {"", 0, 0, 0, 0}, {"per-tenant", 99, 100, rlsv3.RateLimitResponse_RateLimit_MINUTE, 0},
		{"per-path", 19, 20, rlsv3.RateLimitResponse_RateLimit_SECOND, 10}}
	for i, w := range want {
		st := resp.Statuses[i]
		if st.Code != ok || st.CurrentLimit.GetName() != w.name || st.LimitRemaining != w.rem || st.CurrentLimit.GetRequestsPerUnit() != w.rpu ||
			st.CurrentLimit.GetUnit() != w.unit || st.CurrentLimit.GetUnitMultiplier().GetValue() != w.mult {
			t.Errorf("descriptor %d: %v, want %+v", i, st, w)
		}
	}
	if p := header(resp, rls.HeaderRateLimitPolicy); p != `"per-ip";q=3;w=60, "per-tenant";q=100;w=60, "per-path";q=20;w=10` {
		t.Errorf("RateLimit-Policy %q", p)
	}
	if r := header(resp, rls.HeaderRateLimit); r != `"per-ip";r=2;t=60, "per-tenant";r=99;t=60, "per-path";r=19;t=10` {
		t.Errorf("RateLimit %q", r)
	}
}

func TestInvalidArgument(t *testing.T) {
	e := newEnv(t, policy)
	override := d("remote_address", "192.0.2.1")
	override.Limit = &extrlsv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 1} // unit UNKNOWN
	longer := d("remote_address", "192.0.2.1")
	longer.Limit = &extrlsv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 1, Unit: 6, UnitMultiplier: wrapperspb.UInt32(2)}
	many := make([]*extrlsv3.RateLimitDescriptor, tiers.MaxDescriptors+1)
	for i := range many {
		many[i] = d("remote_address", "192.0.2.1")
	}
	for _, c := range []struct {
		req  *rlsv3.RateLimitRequest
		want string
	}{
		{&rlsv3.RateLimitRequest{Descriptors: []*extrlsv3.RateLimitDescriptor{d("k", "v")}}, "domain is empty"},
		{&rlsv3.RateLimitRequest{Domain: "edge"}, "descriptors is empty"},
		{&rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*extrlsv3.RateLimitDescriptor{{}}}, "descriptors[0] has no entries"},
		{&rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*extrlsv3.RateLimitDescriptor{d("k", "v"), override}}, "descriptors[1].limit: unit UNKNOWN"},
		{&rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*extrlsv3.RateLimitDescriptor{longer}}, "descriptors[0].limit: unit_multiplier 2"},
		{&rlsv3.RateLimitRequest{Domain: "edge", Descriptors: many}, "65 descriptors; at most 64"},
	} {
		_, err := e.client.ShouldRateLimit(ctxT(t), c.req)
		if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: %v, want InvalidArgument %q", c.req, err, c.want)
		}
	}
	// Nothing was charged by the refused calls.
	if got := remaining(t, e.call(t, "edge", 0, d("remote_address", "192.0.2.1")), 0, ok); got != 2 {
		t.Fatalf("remaining %d, want 2", got)
	}
}

// failStore fails every Take.
type failStore struct{}

func (failStore) Take(context.Context, []quota.Bucket, []quota.Result) (bool, error) {
	return false, errors.New("store down")
}

// When the store fails, each rule's on_store_error decides.
func TestOnStoreError(t *testing.T) {
	e := newEnvStore(t, `
rules:
  - {name: open, key: [ip], rate: 3/1m, on_store_error: open}
  - {name: closed, key: [tenant], rate: 3/1m, on_store_error: closed}
rls:
  - domain: edge
    descriptors:
      - entries: [{key: remote_address, as: ip}]
        rule: open
      - entries: [{key: tenant, as: tenant}]
        rule: closed
`, failStore{}, nil)
	if resp := e.call(t, "edge", 0, d("remote_address", "192.0.2.1")); resp.OverallCode != ok {
		t.Fatalf("open: %v", resp)
	}
	resp := e.call(t, "edge", 0, d("remote_address", "192.0.2.1"), d("tenant", "acme"))
	if resp.OverallCode != over || resp.Statuses[1].Code != over || header(resp, rls.HeaderRetryAfter) != "1" {
		t.Fatalf("closed: %v", resp)
	}
}

func TestNewRejectsBadOptions(t *testing.T) {
	_, err := rls.New(nil, rls.WithLogger(nil), rls.WithDrainTimeout(0), nil)
	for _, want := range []string{"limiter is nil", "WithLogger: logger is nil", "WithDrainTimeout: 0s must be > 0", "nil Option"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("error %v, want %q", err, want)
		}
	}
}

func TestWithoutResponseHeaders(t *testing.T) {
	e := newEnv(t, policy, rls.WithResponseHeaders(false))
	for range 4 {
		if resp := e.call(t, "edge", 0, d("remote_address", "192.0.2.1")); len(resp.ResponseHeadersToAdd) != 0 {
			t.Fatalf("headers sent: %v", resp.ResponseHeadersToAdd)
		}
	}
}

// Leased and async rules, decided by a local-first store in front of the
// store, as serve-rls composes it: never more than the limit.
func TestLocalFirstRules(t *testing.T) {
	clk := clock.New(time.Time{})
	mem, err := memstore.New(memstore.WithClock(clk))
	if err != nil {
		t.Fatal(err)
	}
	lf, err := localfirst.New(mem, mem, localfirst.WithClock(clk), localfirst.WithLogger(quiet))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = lf.Close(context.Background()) })
	e := newEnvStore(t, `
rules:
  - {name: leased-ip, key: [ip], rate: 5/1h, consistency: leased}
rls:
  - domain: edge
    descriptors:
      - entries: [{key: remote_address, as: ip}]
        rule: leased-ip
`, lf, clk)
	allowed := 0
	for range 8 {
		resp := e.call(t, "edge", 0, d("remote_address", "192.0.2.1"))
		if resp.OverallCode == ok {
			allowed++
		}
	}
	if allowed != 5 {
		t.Fatalf("%d of 8 calls allowed by a leased 5/1h rule, want 5", allowed)
	}
}
