package main

import (
	"context"
	"io"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	"github.com/floodgate-go/floodgate/examples/internal/exampletest"
	"github.com/floodgate-go/floodgate/internal/shoppb"
	"github.com/floodgate-go/floodgate/testing/redistest"
)

// modeRules are the rules TestGRPCExampleRedisModes adds to the example
// policy: one that settles each call's cost when it ends, and one whose
// calls wait for their turn (max_wait).
const modeRules = `  - name: grpc-search-settled
    match: {method: /floodgate.shop.v1.Shop/Search}
    key: [user]
    rate: 100000/1h
    settle: true
  - name: grpc-pay-shaped
    match: {method: /floodgate.shop.v1.Shop/Pay}
    key: [tenant]
    rate: 2/1s
    burst: 1
    max_wait: 2s
`

// TestGRPCExampleRedisModes runs the example with -redis (the observed,
// fallback-guarded Redis store behind a local-first store) on a real
// redis-server, with a policy that adds a rule that settles, a rule that
// waits, and makes grpc-search-user async: it starts and serves; a second
// payment of a tenant waits for its turn and says so (server-timing
// metadata); and the metrics show the searches decided by async; the instance is
// a member of its service's fleet in Redis.
func TestGRPCExampleRedisModes(t *testing.T) {
	srv := redistest.Start(t)
	policy := exampletest.PolicyWith(t, "../policy.yaml", modeRules,
		"  - name: grpc-search-user\n    match: {method: /floodgate.shop.v1.Shop/Search}\n    key: [user]\n",
		"  - name: grpc-search-user\n    match: {method: /floodgate.shop.v1.Shop/Search}\n    key: [user]\n    consistency: async\n")
	out := exampletest.Start(t, run, "-addr", "127.0.0.1:0", "-metrics-addr", "127.0.0.1:0", "-policy", policy, "-work", "1ms",
		"-redis", (&url.URL{Scheme: "redis", Host: srv.Addr()}).String())
	addr := out.WaitFor(t, listening, 1, 10*time.Second)[1]
	metrics := out.WaitFor(t, metricsAt, 1, time.Second)[1]
	out.WaitFor(t, regexp.MustCompile(`store:\s+Redis at redis://`+regexp.QuoteMeta(srv.Addr())), 1, time.Second)
	ctx, cancel := context.WithTimeout(t.Context(), 15*time.Second)
	defer cancel()

	shop := shoppb.NewShopClient(dial(t, addr))
	for i := range 3 {
		if _, err := shop.Search(as(ctx, "dave"), &shoppb.SearchRequest{Query: "lamp"}); err != nil {
			t.Fatalf("search %d: %v", i+1, err)
		}
	}
	var timing []string
	for i := range 2 {
		var md metadata.MD
		pctx := metadata.AppendToOutgoingContext(as(ctx, "erin"), "x-tenant", "acme")
		if _, err := shop.Pay(pctx, &shoppb.PayRequest{AmountCents: 100}, grpc.Header(&md)); err != nil {
			t.Fatalf("payment %d: %v", i+1, err)
		}
		timing = append(timing, strings.Join(md.Get("server-timing"), ","))
	}
	if timing[0] != "" || !strings.HasPrefix(timing[1], "floodgate-wait;dur=") {
		t.Errorf("server-timing of two payments in a row (burst 1, 2/s, max_wait 2s): %q; want none, then a wait", timing)
	}

	// The instance counts itself in its service's fleet, by heartbeats in
	// the same Redis: the local-first shares are split by that count.
	if n, err := srv.Client().ZCard(t.Context(), "fg:fleet:{shop-grpc}").Result(); err != nil || n != 1 {
		t.Errorf("fleet members in Redis: %d (%v), want this instance", n, err)
	}

	resp, err := http.Get(metrics)
	if err != nil {
		t.Fatal(err)
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		t.Fatal(err)
	}
	text := string(body)
	async := exampletest.Decisions(text, "floodgate_policy", "grpc-search-user", "floodgate_source", "async", "floodgate_decision", "allowed")
	store := exampletest.Decisions(text, "floodgate_policy", "grpc-search-user", "floodgate_source", "store")
	t.Logf("grpc-search-user decisions: %v by async, %v by the store", async, store)
	if async != 3 || store != 0 {
		t.Errorf("grpc-search-user: %v searches allowed by async, %v decided by the store; want all 3 by async", async, store)
	}
}
