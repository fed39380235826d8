package tiers_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/quota"
	"github.com/floodgate-go/floodgate/testing/clock"
	"github.com/floodgate-go/floodgate/testing/redistest"
	"github.com/floodgate-go/floodgate/tiers"
	"github.com/floodgate-go/floodgate/tiers/memstore"
	"github.com/floodgate-go/floodgate/tiers/redisstore"
)

const partialPolicy = `
rules:
  - {name: user, key: [user], rate: 10/1s}
  - {name: tenant, key: [tenant], rate: 25/1m, algorithm: fixed_window}
  - {name: calls, key: [tenant], rate: 5/1m, cost: 1, algorithm: fixed_window}
`

// AdmitAtMost grants what every level can give: the user's bucket, then
// the tenant's, binds the grant; nothing left denies with the wait for one
// unit. The same
// exact counts on memstore and on Redis (where the grant is decided in
// take.lua).
func TestAdmitAtMost(t *testing.T) {
	stores := map[string]func(t *testing.T, clk *clock.Fake) quota.Store{
		"memstore": func(t *testing.T, clk *clock.Fake) quota.Store { return newMemstore(t, memstore.WithClock(clk)) },
		"redisstore": func(t *testing.T, clk *clock.Fake) quota.Store {
			s, err := redisstore.New(redistest.Start(t).Client(), redisstore.WithClock(clk))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = s.Close() })
			return s
		},
	}
	for name, newStore := range stores {
		t.Run(name, func(t *testing.T) {
			clk := clock.New(time.Unix(1_800_000_000, 0))
			l := mustLimiter(t, newStore(t, clk), partialPolicy, tiers.WithClock(clk))
			req := func(user string, most int64) *floodgate.Request {
				return &floodgate.Request{Method: "/a.B/C", Cost: most, Identity: floodgate.Identity{Tenant: "acme", User: user}}
			}
			steps := []struct {
				user          string
				most, granted int64
				policy        string
				retry         time.Duration
			}{
				{"ann", 8, 8, "user", 0},                      // user 10 -> 2, tenant 25 -> 17
				{"ann", 8, 2, "user", 0},                      // the user has 2: tenant 15
				{"ann", 8, 0, "user", 100 * time.Millisecond}, // nothing: one token is 100 ms away
				{"bob", 8, 8, "user", 0},                      // tenant 7
				{"cyd", 9, 7, "tenant", 0},                    // the tenant binds: 0 left
				{"dan", 9, 0, "tenant", 0},                    // (retry: the minute's end, checked below)
			}
			for i, st := range steps {
				g, d, err := l.AdmitAtMost(context.Background(), req(st.user, st.most))
				if err != nil {
					t.Fatalf("step %d: %v", i, err)
				}
				if g != st.granted || d.Allowed != (st.granted > 0) || d.Policy != st.policy || st.retry != 0 && d.RetryAfter != st.retry {
					t.Fatalf("step %d (%s, at most %d): granted %d, %+v; want %d by %q", i, st.user, st.most, g, d, st.granted, st.policy)
				}
			}
		})
	}
}

// The fixed-cost rule denies the whole call once its calls are spent.
func TestAdmitAtMostFixedCostRule(t *testing.T) {
	clk := clock.New(time.Unix(1_800_000_000, 0))
	l := mustLimiter(t, newMemstore(t, memstore.WithClock(clk)), partialPolicy, tiers.WithClock(clk))
	r := &floodgate.Request{Method: "/a.B/C", Cost: 1, Identity: floodgate.Identity{Tenant: "t", User: "u"}}
	for i := range 5 {
		if g, d, err := l.AdmitAtMost(context.Background(), r); err != nil || g != 1 || !d.Allowed {
			t.Fatalf("call %d: %d, %+v, %v; want granted 1", i, g, d, err)
		}
	}
	g, d, err := l.AdmitAtMost(context.Background(), r)
	if err != nil || g != 0 || d.Allowed || d.Policy != "calls" {
		t.Fatalf("6th call: %d, %+v, %v; want denied by calls", g, d, err)
	}
}

// A cost below 1 is refused with ErrInvalidCost, nothing charged.
func TestAdmitAtMostBadCost(t *testing.T) {
	l := mustLimiter(t, newMemstore(t), partialPolicy)
	for _, c := range []int64{0, -3} {
		g, _, err := l.AdmitAtMost(context.Background(), &floodgate.Request{Method: "/a.B/C", Cost: c})
		if g != 0 || !errors.Is(err, tiers.ErrInvalidCost) {
			t.Fatalf("cost %d: granted %d, err %v; want ErrInvalidCost", c, g, err)
		}
	}
	if _, _, err := l.AdmitAtMost(context.Background(), nil); err == nil {
		t.Fatal("nil request: no error")
	}
}

// A shadow rule is charged the grant the enforced rules gave, not the
// most asked: after a grant of 3, the shadow bucket holds 97 of 100.
func TestAdmitAtMostShadowChargedTheGrant(t *testing.T) {
	clk := clock.New(time.Unix(1_800_000_000, 0))
	s := newMemstore(t, memstore.WithClock(clk))
	l := mustLimiter(t, s, `
rules:
  - {name: user, key: [user], rate: 3/1m, algorithm: fixed_window}
  - {name: tenant, key: [tenant], rate: 100/1m, algorithm: fixed_window, shadow: true}
`, tiers.WithClock(clk))
	r := &floodgate.Request{Method: "/a.B/C", Cost: 8, Identity: floodgate.Identity{Tenant: "acme", User: "ann"}}
	g, d, err := l.AdmitAtMost(context.Background(), r)
	if err != nil || g != 3 || !d.Allowed {
		t.Fatalf("granted %d, %+v, %v; want 3", g, d, err)
	}
	bs := l.Buckets(nil, r)
	for i := range bs {
		bs[i].Cost = 0
	}
	res := make([]quota.Result, len(bs))
	if _, err := s.Take(context.Background(), bs, res); err != nil {
		t.Fatal(err)
	}
	if res[0].Remaining != 0 || res[1].Remaining != 97 {
		t.Fatalf("remaining user %d, tenant (shadow) %d; want 0 and 97", res[0].Remaining, res[1].Remaining)
	}
}
