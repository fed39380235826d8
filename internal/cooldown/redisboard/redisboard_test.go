package redisboard_test

import (
	"context"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/internal/cooldown"
	"github.com/floodgate-go/floodgate/internal/cooldown/redisboard"
	"github.com/floodgate-go/floodgate/testing/clock"
	"github.com/floodgate-go/floodgate/testing/redistest"
)

// Two Cooldowns, each with its own client to one real redis-server, share
// a cooldown: the one that saw the 429 with Retry-After: 2 stops the other
// for exactly 2 s (fake time), and the key holds the later end only.
func TestCooldownIsFleetWide(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	clk := clock.New(clock.Epoch)
	var cs [2]*cooldown.Cooldown
	for i := range cs {
		b, err := redisboard.New(srv.NewClient(), "test:", clk)
		if err != nil {
			t.Fatal(err)
		}
		cs[i] = cooldown.New(b, clk, nil)
		cs[i].Set(&cooldown.Config{})
	}
	r := &floodgate.Request{Method: "/api.vendor.com/v1/chat"}
	ctx := context.Background()
	d, done, _ := cs[0].Admit(ctx, r)
	if !d.Allowed {
		t.Fatal("first call refused")
	}
	if d, _, _ := cs[1].Admit(ctx, r); !d.Allowed {
		t.Fatal("other replica refused before any cooldown")
	}
	start := clk.Now()
	done(floodgate.Result{Outcome: floodgate.OutcomeDropped, RetryAfter: 2 * time.Second})
	for _, at := range []time.Duration{0, time.Second, 2*time.Second - time.Microsecond} {
		clk.Set(start.Add(at))
		if d, _, _ := cs[1].Admit(ctx, r); d.Allowed || d.RetryAfter != 2*time.Second-at {
			t.Fatalf("other replica at +%v: %+v, want denied with %v left", at, d, 2*time.Second-at)
		}
	}
	clk.Set(start.Add(2 * time.Second))
	if d, _, _ := cs[1].Admit(ctx, r); !d.Allowed {
		t.Fatalf("other replica at +2s: %+v, want allowed", d)
	}
	// The key: the end in µs, expiring a second after it; a shorter
	// refusal leaves it.
	b, _ := redisboard.New(srv.Client(), "test:", clk)
	key := b.Key("api.vendor.com")
	if key != "test:fg:out:cool:{api.vendor.com}" {
		t.Fatalf("key %q", key)
	}
	if err := b.Extend(ctx, "api.vendor.com", clk.Now().Add(10*time.Second)); err != nil {
		t.Fatal(err)
	}
	if err := b.Extend(ctx, "api.vendor.com", clk.Now().Add(time.Second)); err != nil {
		t.Fatal(err)
	}
	end, err := b.Until(ctx, "api.vendor.com")
	if err != nil || !end.Equal(clk.Now().Add(10*time.Second)) {
		t.Fatalf("Until = %v, %v; want the later end %v", end, err, clk.Now().Add(10*time.Second))
	}
	if ttl := srv.Client().PTTL(ctx, key).Val(); ttl <= 10*time.Second || ttl > 11*time.Second {
		t.Fatalf("PTTL %v, want in (10s, 11s]", ttl)
	}
}

// With its Redis gone, a Cooldown keeps the cooldowns it knows and sends
// the rest.
func TestBoardDown(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	clk := clock.New(clock.Epoch)
	b, _ := redisboard.New(srv.NewClient(), "", clk)
	c := cooldown.New(b, clk, nil)
	c.Set(&cooldown.Config{Timeout: 200 * time.Millisecond})
	srv.Kill()
	ctx := context.Background()
	r := &floodgate.Request{Method: "/api.vendor.com/v1"}
	d, done, _ := c.Admit(ctx, r)
	if !d.Allowed {
		t.Fatalf("refused with the board down and no cooldown known: %+v", d)
	}
	done(floodgate.Result{RetryAfter: time.Second})
	if d, _, _ := c.Admit(ctx, r); d.Allowed || d.RetryAfter != time.Second {
		t.Fatalf("the cooldown this process saw: %+v, want denied with 1s", d)
	}
}
