package rls_test

import (
	"math"
	"slices"
	"testing"
	"time"

	extrlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"

	"github.com/floodgate-go/floodgate/rls/translate"
	"github.com/floodgate-go/floodgate/testing/clock"
	"github.com/floodgate-go/floodgate/testing/redistest"
)

// parityPolicy is what translate writes for an envoyproxy/ratelimit
// configuration with a 20/MINUTE limit per value of key1, a shadow one
// per value of key3, and a value of key4 with no rate_limit.
const parityPolicy = `
rules:
  - {name: d.key1, key: ["header:key1"], rate: 20/1m, algorithm: fixed_window}
  - {name: d.key3, key: ["header:key3"], rate: 20/1m, algorithm: fixed_window, shadow: true}
  - {name: d.key1.key2, key: ["header:key1", "header:key2"], rate: 5/1m, algorithm: fixed_window}
rls:
  - domain: d
    descriptors:
      - entries: [{key: key1, as: "header:key1"}]
        rule: d.key1
      - entries: [{key: key3, as: "header:key3"}]
        rule: d.key3
      - entries: [{key: key1, as: "header:key1"}, {key: key2, as: "header:key2"}]
        rule: d.key1.key2
`

// overZero checks envoyproxy/ratelimit's OVER_LIMIT status: the code
// (OK for a shadow limit), the limit, and limit_remaining 0 whatever the
// bucket still holds.
func overZero(t *testing.T, resp *rlsv3.RateLimitResponse, i int, code rlsv3.RateLimitResponse_Code) {
	t.Helper()
	st := resp.Statuses[i]
	if st.Code != code || st.CurrentLimit.GetRequestsPerUnit() != 20 || st.LimitRemaining != 0 {
		t.Fatalf("descriptor %d: %v; want %v, 20 per MINUTE, limit_remaining 0", i, st, code)
	}
}

// From an empty Redis, a hits_addend that does not fit answers
// OVER_LIMIT with limit_remaining 0, as envoyproxy/ratelimit answers
// (limitAfterIncrease > limit: remaining 0), not what the bucket holds.
func TestOverLimitRemainingIsZero(t *testing.T) {
	srv := redistest.Start(t)
	clk := clock.New(time.Time{})
	e := newEnvStore(t, parityPolicy, redisStore(t, srv, clk), clk)

	resp := e.call(t, "d", 21, d("key1", "a"))
	if resp.OverallCode != over {
		t.Fatalf("%v", resp)
	}
	overZero(t, resp, 0, over)

	// A shadow limit that would deny says OK, with limit_remaining 0.
	resp = e.call(t, "d", 21, d("key3", "a"))
	if resp.OverallCode != ok {
		t.Fatalf("%v", resp)
	}
	overZero(t, resp, 0, ok)

	// Two descriptors of one call on one bucket: both over, both 0.
	resp = e.call(t, "d", 0, hits(d("key1", "b"), 21), hits(d("key1", "b"), 21))
	if resp.OverallCode != over {
		t.Fatalf("%v", resp)
	}
	overZero(t, resp, 0, over)
	overZero(t, resp, 1, over)

	// Within the limit, limit_remaining is what is left.
	if got := remaining(t, e.call(t, "d", 20, d("key1", "c")), 0, ok); got != 0 {
		t.Fatalf("20 of 20: remaining %d, want 0", got)
	}
	if got := remaining(t, e.call(t, "d", 5, d("key1", "e")), 0, ok); got != 15 {
		t.Fatalf("5 of 20: remaining %d, want 15", got)
	}
}

// newTranslated serves the translation of an envoyproxy/ratelimit
// configuration from an in-process store on fake time.
func newTranslated(t *testing.T, cfg string, opts translate.Options) *env {
	t.Helper()
	out, err := translate.Translate([]translate.File{{Name: "c.yaml", Data: []byte(cfg)}}, opts)
	if err != nil {
		t.Fatalf("translate: %v", err)
	}
	t.Logf("translation:\n%s", out)
	return newEnv(t, string(out))
}

// A value with no rate_limit matches, and has no limit: envoyproxy/ratelimit
// answers it as it answers a descriptor that matches nothing (GetLimit
// returns nil: OK, no current_limit, limit_remaining 0), unlike an
// unlimited one (OK, limit_remaining 4294967295).
func TestValueWithoutRateLimitAnswersNoLimit(t *testing.T) {
	e := newTranslated(t, `
domain: edge
descriptors:
  - key: remote_address
    rate_limit: {unit: minute, requests_per_unit: 2}
  - key: remote_address
    value: 10.0.0.1
  - key: generic_key
    value: health
    rate_limit: {unlimited: true}
`, translate.Options{})
	for range 3 {
		resp := e.call(t, "edge", 0, d("remote_address", "10.0.0.1"), d("generic_key", "health"))
		if resp.OverallCode != ok {
			t.Fatalf("%v", resp)
		}
		if st := resp.Statuses[0]; st.Code != ok || st.CurrentLimit != nil || st.LimitRemaining != 0 || st.DurationUntilReset != nil {
			t.Fatalf("value with no rate_limit: %v; want OK, no current_limit, limit_remaining 0", st)
		}
		if st := resp.Statuses[1]; st.Code != ok || st.CurrentLimit != nil || st.LimitRemaining != math.MaxUint32 {
			t.Fatalf("unlimited: %v; want OK, no current_limit, limit_remaining 4294967295", st)
		}
	}
	// Another value is limited by the any-value descriptor.
	if got := remaining(t, e.call(t, "edge", 0, d("remote_address", "10.0.0.2")), 0, ok); got != 1 {
		t.Fatalf("another address: remaining %d, want 1", got)
	}
}

// An entry with the empty value matches the descriptor that takes any
// value and is counted apart, as envoyproxy/ratelimit counts it (its
// lookup falls back from "key2_" to "key2", and its cache key has
// "key2__"): its own bucket, limited like any other value.
func TestEmptyValueHasItsOwnCounter(t *testing.T) {
	srv := redistest.Start(t)
	clk := clock.New(time.Time{})
	e := newEnvStore(t, parityPolicy, redisStore(t, srv, clk), clk)

	empty := func() *extrlsv3.RateLimitDescriptor { return d("key1", "a", "key2", "") }
	for i := range 5 {
		resp := e.call(t, "d", 0, empty())
		st := resp.Statuses[0]
		if st.Code != ok || st.CurrentLimit.GetName() != "d.key1.key2" || st.LimitRemaining != uint32(4-i) {
			t.Fatalf("call %d: %v; want OK at d.key1.key2 with %d left", i, st, 4-i)
		}
	}
	overZero5 := func(resp *rlsv3.RateLimitResponse) {
		t.Helper()
		if st := resp.Statuses[0]; resp.OverallCode != over || st.Code != over || st.CurrentLimit.GetRequestsPerUnit() != 5 || st.LimitRemaining != 0 {
			t.Fatalf("%v; want OVER_LIMIT at 5 per MINUTE", resp)
		}
	}
	overZero5(e.call(t, "d", 0, empty()))
	// Another value of key2, and key1 alone, are other counters.
	if got := remaining(t, e.call(t, "d", 0, d("key1", "a", "key2", "x")), 0, ok); got != 4 {
		t.Fatalf("key2=x: remaining %d, want 4", got)
	}
	if got := remaining(t, e.call(t, "d", 0, d("key1", "a")), 0, ok); got != 19 {
		t.Fatalf("key1=a: remaining %d, want 19", got)
	}
	// An empty value alone is a counter too, apart from every other value.
	for i := range 20 {
		if got := remaining(t, e.call(t, "d", 0, d("key1", "")), 0, ok); got != uint32(19-i) {
			t.Fatalf("key1='' call %d: remaining %d", i, got)
		}
	}
	if resp := e.call(t, "d", 0, d("key1", "")); resp.OverallCode != over {
		t.Fatalf("key1='' over its limit: %v", resp)
	}
	keys, err := srv.Client().Keys(ctxT(t), "*").Result()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("keys: %v", keys)
	if len(keys) != 4 {
		t.Fatalf("redis keys %v, want 4: key1=a/key2='', key1=a/key2=x, key1=a, key1=''", keys)
	}
}

// requests_per_unit: 0 is answered as envoyproxy/ratelimit answers it:
// OVER_LIMIT with the limit (0 per unit), limit_remaining 0 and the time
// to the end of the unit; in shadow_mode OK with the same.
func TestRequestsPerUnitZeroAnswer(t *testing.T) {
	e := newTranslated(t, `
domain: edge
descriptors:
  - key: generic_key
    value: blocked
    rate_limit: {unit: minute, requests_per_unit: 0}
  - key: generic_key
    value: watched
    shadow_mode: true
    rate_limit: {unit: hour, requests_per_unit: 0}
`, translate.Options{})
	resp := e.call(t, "edge", 0, d("generic_key", "blocked"), d("generic_key", "watched"))
	if resp.OverallCode != over {
		t.Fatalf("%v", resp)
	}
	st := resp.Statuses[0]
	if st.Code != over || st.CurrentLimit.GetName() != "edge.generic_key_blocked" || st.CurrentLimit.GetRequestsPerUnit() != 0 ||
		st.CurrentLimit.GetUnit() != rlsv3.RateLimitResponse_RateLimit_MINUTE || st.LimitRemaining != 0 ||
		st.DurationUntilReset.AsDuration() <= 0 || st.DurationUntilReset.AsDuration() > time.Minute {
		t.Fatalf("requests_per_unit 0: %v", st)
	}
	resp = e.call(t, "edge", 0, d("generic_key", "watched"))
	if st := resp.Statuses[0]; resp.OverallCode != ok || st.Code != ok || st.CurrentLimit.GetUnit() != rlsv3.RateLimitResponse_RateLimit_HOUR || st.LimitRemaining != 0 {
		t.Fatalf("shadow requests_per_unit 0: %v", resp)
	}
	// hits_addend 0 checks, and 0 > 0 is within the limit.
	if st := e.call(t, "edge", 0, hits(d("generic_key", "blocked"), 0)).Statuses[0]; st.Code != ok || st.CurrentLimit.GetRequestsPerUnit() != 0 || st.LimitRemaining != 0 {
		t.Fatalf("hits_addend 0: %v", st)
	}
}

// overridden gives desc a limit override, as Envoy sends one from
// dynamic metadata.
func overridden(desc *extrlsv3.RateLimitDescriptor, rate uint32, unit typev3.RateLimitUnit) *extrlsv3.RateLimitDescriptor {
	desc.Limit = &extrlsv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: rate, Unit: unit}
	return desc
}

// A descriptor's own limit (Envoy's limit override) decides it instead of
// the mapping, in the counter envoyproxy/ratelimit counts it in: the
// domain, every entry and the unit, so with the entries and the unit of a
// mapped fixed-window rule that rule's bucket, else a bucket of its own
// (another unit is another counter, another rate of the same unit the
// same one); current_limit is the override, unnamed. In a domain the policy does not name it limits
// nothing, as there (GetLimit returns nil for an unknown domain first).
func TestLimitOverride(t *testing.T) {
	srv := redistest.Start(t)
	clk := clock.New(time.Time{})
	e := newEnvStore(t, parityPolicy, redisStore(t, srv, clk), clk)
	minute := typev3.RateLimitUnit_MINUTE
	for i := range 3 {
		resp := e.call(t, "d", 0, overridden(d("key1", "a"), 3, minute))
		st := resp.Statuses[0]
		if st.Code != ok || st.CurrentLimit.GetName() != "" || st.CurrentLimit.GetRequestsPerUnit() != 3 || st.CurrentLimit.GetUnit() != rlsv3.RateLimitResponse_RateLimit_MINUTE || st.LimitRemaining != uint32(2-i) {
			t.Fatalf("call %d: %v; want OK, 3 per MINUTE, %d left", i, st, 2-i)
		}
	}
	// The same descriptor and unit at another rate: the same counter.
	if got := remaining(t, e.call(t, "d", 0, overridden(d("key1", "a"), 10, minute)), 0, ok); got != 6 {
		t.Fatalf("10 per MINUTE after 3: remaining %d, want 6", got)
	}
	resp := e.call(t, "d", 0, overridden(d("key1", "a"), 3, minute))
	if st := resp.Statuses[0]; resp.OverallCode != over || st.Code != over || st.LimitRemaining != 0 || st.CurrentLimit.GetRequestsPerUnit() != 3 {
		t.Fatalf("over the override: %v", resp)
	}
	// Another unit is another counter; the mapping's rule, of the same
	// unit, counted the 4 hits the minute's overrides allowed.
	if got := remaining(t, e.call(t, "d", 0, overridden(d("key1", "a"), 3, typev3.RateLimitUnit_HOUR)), 0, ok); got != 2 {
		t.Fatalf("3 per HOUR: remaining %d, want 2", got)
	}
	if got := remaining(t, e.call(t, "d", 0, d("key1", "a")), 0, ok); got != 15 {
		t.Fatalf("the rule's bucket: remaining %d, want 15", got)
	}
	// A descriptor no mapping knows is limited by its override too.
	if got := remaining(t, e.call(t, "d", 0, overridden(d("other", "x", "k", ""), 2, minute)), 0, ok); got != 1 {
		t.Fatalf("unmapped descriptor with an override: remaining %d, want 1", got)
	}
	// An override of 0 is always over; in an unknown domain, nothing.
	if st := e.call(t, "d", 0, overridden(d("key1", "z"), 0, minute)).Statuses[0]; st.Code != over || st.CurrentLimit.GetRequestsPerUnit() != 0 || st.LimitRemaining != 0 {
		t.Fatalf("override of 0: %v", st)
	}
	if st := e.call(t, "elsewhere", 0, overridden(d("key1", "a"), 1, minute)).Statuses[0]; st.Code != ok || st.CurrentLimit != nil {
		t.Fatalf("unknown domain: %v", st)
	}
	keys, err := srv.Client().Keys(ctxT(t), "fg:{rls:*").Result()
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(keys)
	if want := []string{"fg:{rls:d:key1=a}:fixed_window:1h", "fg:{rls:d:other=x:k=}:fixed_window:1m"}; !slices.Equal(keys, want) {
		t.Fatalf("override keys %q, want %q", keys, want)
	}
}

// is_negative_hits gives the hits back through the store's Settle, so
// Envoy's per-request concurrency pattern (hits when a request starts,
// the same hits negative when its stream ends) counts requests in
// flight: the count goes back down, and a limit of N admits N at once.
func TestNegativeHitsGiveBack(t *testing.T) {
	srv := redistest.Start(t)
	clk := clock.New(time.Time{})
	e := newEnvStore(t, parityPolicy, redisStore(t, srv, clk), clk)
	negative := func(desc *extrlsv3.RateLimitDescriptor, n uint64) *extrlsv3.RateLimitDescriptor {
		desc = hits(desc, n)
		desc.IsNegativeHits = true
		return desc
	}
	if got := remaining(t, e.call(t, "d", 0, hits(d("key1", "a"), 5)), 0, ok); got != 15 {
		t.Fatalf("after 5: remaining %d", got)
	}
	resp := e.call(t, "d", 0, negative(d("key1", "a"), 3))
	if st := resp.Statuses[0]; resp.OverallCode != ok || st.Code != ok || st.CurrentLimit != nil {
		t.Fatalf("give-back: %v; want OK, deciding nothing", resp)
	}
	if got := remaining(t, e.call(t, "d", 0, hits(d("key1", "a"), 0)), 0, ok); got != 18 {
		t.Fatalf("after giving 3 back: remaining %d, want 18", got)
	}
	// Concurrency: 20 requests in flight fill the limit; one that ends
	// makes room for one more.
	for range 18 {
		remaining(t, e.call(t, "d", 0, d("key1", "a")), 0, ok)
	}
	if resp := e.call(t, "d", 0, d("key1", "a")); resp.OverallCode != over {
		t.Fatalf("21st in flight: %v", resp)
	}
	e.call(t, "d", 0, negative(d("key1", "a"), 1))
	if got := remaining(t, e.call(t, "d", 0, d("key1", "a")), 0, ok); got != 0 {
		t.Fatalf("after one ended: remaining %d, want 0", got)
	}
	// A give-back and a charge in one call; and an override's bucket.
	resp = e.call(t, "d", 0, negative(d("key1", "a"), 2), hits(d("key1", "b"), 1))
	if resp.OverallCode != ok || remaining(t, resp, 1, ok) != 19 {
		t.Fatalf("mixed call: %v", resp)
	}
	e.call(t, "d", 0, overridden(hits(d("key1", "c"), 2), 5, typev3.RateLimitUnit_MINUTE))
	e.call(t, "d", 0, overridden(negative(d("key1", "c"), 1), 5, typev3.RateLimitUnit_MINUTE))
	if got := remaining(t, e.call(t, "d", 0, overridden(hits(d("key1", "c"), 0), 5, typev3.RateLimitUnit_MINUTE)), 0, ok); got != 4 {
		t.Fatalf("override after +2 -1: remaining %d, want 4", got)
	}
	if got := remaining(t, e.call(t, "d", 0, hits(d("key1", "a"), 0)), 0, ok); got != 2 {
		t.Fatalf("key1=a after giving 2 back: remaining %d, want 2", got)
	}
}

// A give-back never denies, even at a limit of 0.
func TestNegativeHitsNeverDeny(t *testing.T) {
	e := newEnv(t, parityPolicy)
	desc := overridden(hits(d("key1", "a"), 1), 0, typev3.RateLimitUnit_MINUTE)
	desc.IsNegativeHits = true
	if resp := e.call(t, "d", 0, desc); resp.OverallCode != ok || resp.Statuses[0].Code != ok {
		t.Fatalf("%v", resp)
	}
}
