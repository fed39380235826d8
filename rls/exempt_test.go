package rls_test

import (
	"math"
	"testing"
)

const exemptPolicy = `
exempt: [198.51.100.0/24]
rules:
  - {name: per-ip, key: [ip], rate: 3/1m, algorithm: fixed_window}
  - {name: per-user, key: [user], rate: 5/1m, algorithm: fixed_window}
rls:
  - domain: edge
    descriptors:
      - entries: [{key: remote_address, as: ip}]
        rule: per-ip
      - entries: [{key: user, as: user}]
        rule: per-user
`

// An exempt client is not limited: its descriptor says OK with no
// current limit, as an unlimited one (it was told a current limit of 0
// with 0 remaining, which Envoy's X-RateLimit headers would show).
func TestExemptShowsNoLimit(t *testing.T) {
	e := newEnv(t, exemptPolicy)
	resp := e.call(t, "edge", 0, d("remote_address", "198.51.100.7"), d("user", "bob"))
	if resp.OverallCode != ok {
		t.Fatalf("%v", resp)
	}
	st := resp.Statuses[0]
	if st.CurrentLimit != nil || st.LimitRemaining != math.MaxUint32 {
		t.Fatalf("exempt descriptor: current_limit %v, limit_remaining %d; want none, and the most remaining (as an unlimited descriptor)", st.CurrentLimit, st.LimitRemaining)
	}
}
