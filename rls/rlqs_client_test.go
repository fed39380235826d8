package rls_test

import (
	"context"
	"testing"
	"time"

	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"

	"github.com/floodgate-go/floodgate/rls/internal/rlqsclient"
)

// waitAssignment waits (real time, bounded) until the client's
// assignment of id reads want.
func waitAssignment(t *testing.T, c *rlqsclient.Client, id map[string]string, want string) {
	t.Helper()
	got := ""
	for range 250 {
		if got = c.Assignment(id); got == want {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("assignment %q, want %q", got, want)
}

func count(c *rlqsclient.Client, id map[string]string, n int) int {
	ok := 0
	for range n {
		if c.Allow(id) {
			ok++
		}
	}
	return ok
}

// A client that behaves as Envoy's filter against the server: its first
// request is decided by no_assignment_behavior and reported at once, the
// token bucket it is assigned admits its max_tokens and then its rate,
// after the TTL the expired fallback decides, and a report refreshes the
// assignment without refilling the bucket.
func TestQuotaEnvoyLikeClient(t *testing.T) {
	e := newMemQEnv(t, quotaPolicy)
	deny := &typev3.RateLimitStrategy{Strategy: &typev3.RateLimitStrategy_BlanketRule_{BlanketRule: typev3.RateLimitStrategy_DENY_ALL}}
	c, err := rlqsclient.New(context.Background(), e.conn, rlqsclient.Config{Domain: "edge", Manual: true, ExpiredFallback: deny, Clock: e.clk})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if !c.Allow(acme) {
		t.Fatal("the first request was denied; no_assignment_behavior allows")
	}
	waitAssignment(t, c, acme, "bucket 100/1s max 25")
	if n := count(c, acme, 30); n != 25 {
		t.Fatalf("%d of 30 admitted at once; want max_tokens, 25", n)
	}
	e.clk.Advance(100 * time.Millisecond)
	if n := count(c, acme, 30); n != 10 {
		t.Fatalf("%d admitted 100 ms later; want 10 at 100/s", n)
	}
	e.clk.Advance(7 * time.Second) // the TTL (5 s cadence + 2 s) is over
	if got := c.Assignment(acme); got != "expired" {
		t.Fatalf("assignment %q after its TTL; want expired", got)
	}
	if c.Allow(acme) {
		t.Fatal("admitted after the TTL; the expired fallback is DENY_ALL")
	}
	if err := c.Report(); err != nil {
		t.Fatal(err)
	}
	waitAssignment(t, c, acme, "bucket 100/1s max 25")
	if st := c.Stats(); st.Reports != 2 || st.Fresh != 25 || st.Unassigned != 1 {
		t.Fatalf("stats %+v; want 2 reports, one token bucket of 25 that started full, one request without assignment", st)
	}
}
