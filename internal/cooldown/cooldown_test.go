package cooldown_test

import (
	"context"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/internal/cooldown"
	"github.com/floodgate-go/floodgate/testing/clock"
)

var vendor = &floodgate.Request{Method: "/api.vendor.com/v1/chat"}

// admit admits one call to vendor and reports whether it was allowed,
// with the deny's RetryAfter.
func admit(t *testing.T, c *cooldown.Cooldown, r *floodgate.Request) (bool, time.Duration, floodgate.Done) {
	t.Helper()
	d, done, err := c.Admit(context.Background(), r)
	if err != nil {
		t.Fatal(err)
	}
	if d.Allowed == (d.RetryAfter != 0) {
		t.Fatalf("decision %+v: an allow has no RetryAfter and a deny has one", d)
	}
	return d.Allowed, d.RetryAfter, done
}

// fleet returns n Cooldowns sharing one in-process board on clk.
func fleet(n int, clk floodgate.Clock, cfg cooldown.Config) []*cooldown.Cooldown {
	board := cooldown.NewMemory()
	cs := make([]*cooldown.Cooldown, n)
	for i := range cs {
		cs[i] = cooldown.New(board, clk, nil)
		cs[i].Set(&cfg)
	}
	return cs
}

// A 429 with Retry-After: 2 seen by one client stops every client sharing
// the board for exactly 2 s: denied up to the last nanosecond before,
// with the time left, allowed from the instant it ends.
func TestRetryAfterStopsEveryClientExactly(t *testing.T) {
	t.Parallel()
	clk := clock.New(clock.Epoch)
	cs := fleet(3, clk, cooldown.Config{}) // Sync 0: the board is read on every call
	ok, _, done := admit(t, cs[0], vendor)
	if !ok || done == nil {
		t.Fatal("first call refused")
	}
	start := clk.Now()
	done(floodgate.Result{Outcome: floodgate.OutcomeDropped, RetryAfter: 2 * time.Second})
	for _, at := range []time.Duration{0, time.Millisecond, time.Second, 2*time.Second - 1} {
		clk.Set(start.Add(at))
		for i, c := range cs {
			ok, ra, _ := admit(t, c, vendor)
			if ok || ra != 2*time.Second-at {
				t.Fatalf("client %d at +%v: allowed %v, retry after %v; want denied, %v", i, at, ok, ra, 2*time.Second-at)
			}
		}
	}
	clk.Set(start.Add(2 * time.Second))
	for i, c := range cs {
		if ok, _, _ := admit(t, c, vendor); !ok {
			t.Fatalf("client %d refused when the cooldown ended", i)
		}
	}
	// Another target was never cooling down.
	if ok, _, _ := admit(t, cs[1], &floodgate.Request{Method: "/other.example/v1"}); !ok {
		t.Fatal("a call to another host was refused")
	}
}

// With Sync, a client reads the board at most once per Sync however many
// calls it makes, and learns of another client's cooldown at its first
// read after it started.
func TestSyncBoundsBoardReads(t *testing.T) {
	t.Parallel()
	clk := clock.New(clock.Epoch)
	cs := fleet(2, clk, cooldown.Config{Sync: 100 * time.Millisecond})
	a, b := cs[0], cs[1]
	for range 1000 {
		admit(t, b, vendor)
	}
	if n := b.Reads.Load(); n != 1 {
		t.Fatalf("1000 calls at one instant read the board %d times, want 1", n)
	}
	_, _, done := admit(t, a, vendor)
	done(floodgate.Result{RetryAfter: time.Second})
	clk.Advance(99 * time.Millisecond)
	if ok, _, _ := admit(t, b, vendor); !ok {
		t.Fatal("b refused before its next read of the board")
	}
	clk.Advance(time.Millisecond)
	if ok, ra, _ := admit(t, b, vendor); ok || ra != 900*time.Millisecond {
		t.Fatalf("b at its next read: allowed %v, retry after %v; want denied, 900ms", ok, ra)
	}
	if n := b.Reads.Load(); n != 2 {
		t.Fatalf("board reads %d, want 2", n)
	}
	// Known locally now: no further read until it ends.
	clk.Advance(899 * time.Millisecond)
	admit(t, b, vendor)
	if n := b.Reads.Load(); n != 2 {
		t.Fatalf("board reads %d during a known cooldown, want 2", n)
	}
}

// A refusal without a delay takes Default, a delay beyond Max is capped,
// and a shorter refusal never shortens a cooldown in force.
func TestDefaultMaxAndExtend(t *testing.T) {
	t.Parallel()
	clk := clock.New(clock.Epoch)
	c := fleet(1, clk, cooldown.Config{Default: 3 * time.Second, Max: 10 * time.Second})[0]
	for _, tc := range []struct {
		retry, want time.Duration
	}{
		{-1, 3 * time.Second},
		{time.Hour, 10 * time.Second},
	} {
		clk.Advance(time.Hour)
		_, _, done := admit(t, c, vendor)
		done(floodgate.Result{RetryAfter: tc.retry})
		if ok, ra, _ := admit(t, c, vendor); ok || ra != tc.want {
			t.Fatalf("RetryAfter %v: allowed %v, retry after %v; want %v", tc.retry, ok, ra, tc.want)
		}
	}
	clk.Advance(time.Hour)
	_, _, d1 := admit(t, c, vendor)
	_, _, d2 := admit(t, c, vendor)
	d1(floodgate.Result{RetryAfter: 5 * time.Second})
	d2(floodgate.Result{RetryAfter: time.Second})
	if ok, ra, _ := admit(t, c, vendor); ok || ra != 5*time.Second {
		t.Fatalf("after 5s then 1s: allowed %v, retry after %v; want 5s", ok, ra)
	}
	// A call that succeeded or failed without a delay starts nothing.
	clk.Advance(time.Hour)
	_, _, done := admit(t, c, vendor)
	done(floodgate.Result{Outcome: floodgate.OutcomeFailed})
	if ok, _, _ := admit(t, c, vendor); !ok {
		t.Fatal("a failure without a delay started a cooldown")
	}
}

// Disabled (no outbound: section), a Cooldown allows everything and holds
// nothing.
func TestDisabled(t *testing.T) {
	t.Parallel()
	c := cooldown.New(cooldown.NewMemory(), clock.New(clock.Epoch), nil)
	if ok, _, done := admit(t, c, vendor); !ok || done != nil {
		t.Fatalf("disabled: allowed %v, done %v", ok, done != nil)
	}
}

func TestTarget(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"/api.vendor.com/v1/chat":  "api.vendor.com",
		"/127.0.0.1:8080/x":        "127.0.0.1:8080",
		"/vendor.v1.Chat/Complete": "vendor.v1.Chat",
		"/host":                    "host",
		"":                         "",
	} {
		if got := cooldown.Target(in); got != want {
			t.Errorf("Target(%q) = %q, want %q", in, got, want)
		}
	}
}
