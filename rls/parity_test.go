package rls_test

import (
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

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
