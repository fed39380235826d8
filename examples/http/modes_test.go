package main

import (
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate/examples/internal/exampletest"
	"github.com/floodgate-go/floodgate/testing/redistest"
)

// modeRules are the rules TestHTTPExampleRedisModes adds to the example
// policy: one that settles each request's cost when it ends, and one
// whose requests wait for their turn (max_wait).
const modeRules = `  - name: search-settled
    match: {method: "GET /v1/search"}
    key: [user]
    rate: 100000/1h
    settle: true
  - name: payments-shaped
    match: {method: "POST /v1/payments"}
    key: [tenant]
    rate: 2/1s
    burst: 1
    max_wait: 2s
`

// TestHTTPExampleRedisModes runs the example with -redis (the observed,
// fallback-guarded Redis store behind a local-first store) on a real
// redis-server, with a policy that adds a rule that settles, a rule that
// waits, and makes search-user async: it starts and serves; a second
// payment of a tenant waits for its turn and says so (Server-Timing); and
// the metrics show the searches decided by async; the instance is
// a member of its service's fleet in Redis.
func TestHTTPExampleRedisModes(t *testing.T) {
	srv := redistest.Start(t)
	policy := exampletest.PolicyWith(t, "../policy.yaml", modeRules,
		"  - name: search-user\n    match: {method: \"GET /v1/search\"}\n    key: [user]\n",
		"  - name: search-user\n    match: {method: \"GET /v1/search\"}\n    key: [user]\n    consistency: async\n")
	out := exampletest.Start(t, run, "-addr", "127.0.0.1:0", "-metrics-addr", "127.0.0.1:0", "-policy", policy, "-work", "1ms",
		"-redis", (&url.URL{Scheme: "redis", Host: srv.Addr()}).String())
	api := out.WaitFor(t, listening, 1, 10*time.Second)[1]
	metrics := out.WaitFor(t, metricsAt, 1, time.Second)[1]
	out.WaitFor(t, regexp.MustCompile(`store:\s+Redis at redis://`+regexp.QuoteMeta(srv.Addr())), 1, time.Second)

	for i := range 3 {
		if resp, body := get(t, "GET", api+"/v1/search?q=lamp", "X-User", "dave"); resp.StatusCode != http.StatusOK {
			t.Fatalf("search %d: %d %s", i+1, resp.StatusCode, body)
		}
	}
	var timing []string
	for i := range 2 {
		resp, body := get(t, "POST", api+"/v1/payments", "X-Tenant", "acme", "X-User", "erin")
		if resp.StatusCode != http.StatusCreated {
			t.Fatalf("payment %d: %d %s", i+1, resp.StatusCode, body)
		}
		timing = append(timing, resp.Header.Get("Server-Timing"))
	}
	if timing[0] != "" || !strings.HasPrefix(timing[1], "floodgate-wait;dur=") {
		t.Errorf("Server-Timing of two payments in a row (burst 1, 2/s, max_wait 2s): %q; want none, then a wait", timing)
	}

	// The instance counts itself in its service's fleet, by heartbeats in
	// the same Redis: the local-first shares are split by that count.
	if n, err := srv.Client().ZCard(t.Context(), "fg:fleet:{shop-http}").Result(); err != nil || n != 1 {
		t.Errorf("fleet members in Redis: %d (%v), want this instance", n, err)
	}

	_, text := get(t, "GET", metrics)
	async := exampletest.Decisions(text, "floodgate_policy", "search-user", "floodgate_source", "async", "floodgate_decision", "allowed")
	store := exampletest.Decisions(text, "floodgate_policy", "search-user", "floodgate_source", "store")
	t.Logf("search-user decisions: %v by async, %v by the store", async, store)
	if async != 3 || store != 0 {
		t.Errorf("search-user: %v searches allowed by async, %v decided by the store; want all 3 by async", async, store)
	}
}
