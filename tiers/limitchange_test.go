package tiers_test

import (
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/quota"
	"github.com/floodgate-go/floodgate/tiers"
)

// onEveryStore runs test, in parallel, on a limiter of policy y over each
// store the policy-change tests run on: the in-process store and Redis,
// standalone and a 3-master Cluster, each on fake time
// (onEveryMeterStore, without the store).
func onEveryStore(t *testing.T, y string, test func(t *testing.T, l *tiers.Limiter)) {
	onEveryMeterStore(t, y, func(t *testing.T, _ quota.Store, l *tiers.Limiter) { test(t, l) })
}

// admitN admits r n times and returns how many were allowed, and the last
// decision.
func admitN(t *testing.T, l *tiers.Limiter, r *floodgate.Request, n int) (int, floodgate.Decision) {
	t.Helper()
	allowed := 0
	var d floodgate.Decision
	for range n {
		if d = admit(t, l, r); d.Allowed {
			allowed++
		}
	}
	return allowed, d
}

// setPolicy replaces l's policy with y, as a reload of the file does.
func setPolicy(t *testing.T, l *tiers.Limiter, y string) {
	t.Helper()
	if err := l.SetPolicy(mustLoad(t, y)); err != nil {
		t.Fatalf("SetPolicy: %v", err)
	}
}

// TestRaiseGivesRoomAtOnce is the operator's probe of issue 42 on every
// store: a rule of 10/1h burst 10, a user spends all 10; the rule is
// raised to 20/1h burst 20 and the user has exactly the 10 more at once
// (their consumption, 10, carried over, not their tokens, 0); then cut
// to 5/1h burst 5 and the user has none, and waits out the 15 units
// consumed beyond the new burst plus the one asked for at the rate they
// were consumed under (20/h: 48 minutes), the bucket full again in an
// hour, as that rate would have made it.
func TestRaiseGivesRoomAtOnce(t *testing.T) {
	t.Parallel()
	onEveryStore(t, `
rules:
  - {name: probe-hour, key: [user], rate: 10/1h, burst: 10}
`, func(t *testing.T, l *tiers.Limiter) {
		r := &floodgate.Request{Method: "/a.B/C", Identity: floodgate.Identity{User: "u1"}}
		if n, d := admitN(t, l, r, 11); n != 10 || d.Allowed {
			t.Fatalf("before the raise: %d of 11 allowed (last %+v), want 10", n, d)
		}
		setPolicy(t, l, `
rules:
  - {name: probe-hour, key: [user], rate: 20/1h, burst: 20}
`)
		d := admit(t, l, r)
		if !d.Allowed || d.Limit != 20 || d.Remaining != 9 {
			t.Fatalf("first request after the raise: %+v, want allowed, limit 20, remaining 9", d)
		}
		if n, d := admitN(t, l, r, 10); n != 9 || d.Allowed {
			t.Fatalf("after the raise: %d more of 10 allowed (last %+v), want 9 (10 in all)", n, d)
		}
		setPolicy(t, l, `
rules:
  - {name: probe-hour, key: [user], rate: 5/1h, burst: 5}
`)
		d = admit(t, l, r)
		if d.Allowed || d.Limit != 5 || d.Remaining != 0 || d.RetryAfter != 48*time.Minute || d.Reset != time.Hour {
			t.Fatalf("after the cut: %+v, want denied, limit 5, remaining 0, retry-after 48m (16 units at 20/h), reset 1h", d)
		}
		// Another user's bucket is untouched by any of it.
		other := &floodgate.Request{Method: "/a.B/C", Identity: floodgate.Identity{User: "u2"}}
		if n, _ := admitN(t, l, other, 6); n != 5 {
			t.Fatalf("another user after the cut: %d of 6 allowed, want 5", n)
		}
	})
}

// TestTierUpgradeGivesRoomAtOnce: a tenant on the free tier (10/1h burst
// 10) spends it all; upgraded to pro (100/1h burst 100) under rate: tier,
// it has the 90 units pro gives beyond what it used, at once; moved back
// to free, it has none.
func TestTierUpgradeGivesRoomAtOnce(t *testing.T) {
	t.Parallel()
	onEveryStore(t, `
tiers:
  free: {rate: 10/1h, burst: 10}
  pro:  {rate: 100/1h, burst: 100}
default_tier: free
rules:
  - {name: tenant-plan, key: [tenant], rate: tier}
`, func(t *testing.T, l *tiers.Limiter) {
		r := &floodgate.Request{Method: "/a.B/C", Identity: floodgate.Identity{Tenant: "acme"}, Tier: "free"}
		if n, d := admitN(t, l, r, 11); n != 10 || d.Allowed {
			t.Fatalf("on free: %d of 11 allowed (last %+v), want 10", n, d)
		}
		r.Tier = "pro"
		if n, d := admitN(t, l, r, 91); n != 90 || d.Allowed || d.Limit != 100 {
			t.Fatalf("upgraded to pro: %d of 91 allowed (last %+v), want 90, limit 100", n, d)
		}
		r.Tier = "free"
		if d := admit(t, l, r); d.Allowed || d.Limit != 10 {
			t.Fatalf("back on free: %+v, want denied, limit 10", d)
		}
	})
}
