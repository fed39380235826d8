package tiers_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/testing/clock"
	"github.com/floodgate-go/floodgate/testing/redistest"
	"github.com/floodgate-go/floodgate/tiers"
	"github.com/floodgate-go/floodgate/tiers/redisstore"
)

// roundTrips is a go-redis hook that counts what the client sends Redis:
// each command one, each pipeline one (its commands go together).
type roundTrips struct{ n atomic.Int64 }

func (h *roundTrips) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *roundTrips) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		h.n.Add(1)
		return next(ctx, cmd)
	}
}

func (h *roundTrips) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		h.n.Add(1)
		return next(ctx, cmds)
	}
}

// countedRedis starts a redis-server and returns a Limiter with policy
// over a store on fake time whose client counts its round trips.
func countedRedis(t *testing.T, policy string) (*tiers.Limiter, *clock.Fake, *roundTrips) {
	t.Helper()
	srv := redistest.Start(t)
	c := srv.NewClient()
	h := &roundTrips{}
	c.AddHook(h)
	clk := clock.New(time.Unix(1_800_000_000, 0))
	s, err := redisstore.New(c, redisstore.WithClock(clk))
	if err != nil {
		t.Fatal(err)
	}
	return mustLimiter(t, s, policy), clk, h
}

var _ redis.Hook = (*roundTrips)(nil)

// Available on a real Redis, on fake time: exactly the alternatives with
// quota, each query one round trip (one script call) whatever the number
// of alternatives, and nothing charged.
func TestAvailableOnRedis(t *testing.T) {
	t.Parallel()
	l, clk, h := countedRedis(t, availablePolicy)
	testAvailable(t, l, clk, func() int { return int(h.n.Load()) })
}

// Soft rules on a real Redis: a request within every limit is one round
// trip; one over a soft rule is admitted, marked and charged nothing
// there, at the price of a take that leaves that rule out.
func TestSoftRulesOnRedis(t *testing.T) {
	t.Parallel()
	l, clk, h := countedRedis(t, softPolicy)
	r := &floodgate.Request{Method: "/a.B/C", Identity: floodgate.Identity{Tenant: "acme", User: "ann"}}
	wantSoft := []string{"", "", "", "plan", "plan,burst", "plan,burst"}
	wantTrips := []int64{1, 1, 1, 2, 2, 2} // both soft rules deny the 5th's first take: one retake
	for i, soft := range wantSoft {
		before := h.n.Load()
		d := admit(t, l, r)
		if !d.Allowed || d.SoftExceeded != soft || d.Policy != "user" || d.Remaining != int64(5-i) {
			t.Fatalf("request %d: %+v, want allowed by user, SoftExceeded %q", i+1, d, soft)
		}
		if got := h.n.Load() - before; got != wantTrips[i] {
			t.Fatalf("request %d: %d round trips, want %d", i+1, got, wantTrips[i])
		}
	}
	sameLeft(t, "after 6", left(t, l, r), map[string]int64{"plan": 0, "burst": 0, "user": 0})
	if d := admit(t, l, r); d.Allowed || d.Policy != "user" || d.SoftExceeded != "" {
		t.Fatalf("7th: %+v", d)
	}
	clk.Advance(20 * time.Second)
	sameLeft(t, "20s later", left(t, l, r), map[string]int64{"plan": 1, "burst": 1, "user": 2})
}
