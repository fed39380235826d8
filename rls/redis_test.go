package rls_test

import (
	"net/netip"
	"testing"
	"time"

	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/fallback"
	"github.com/floodgate-go/floodgate/testing/clock"
	"github.com/floodgate-go/floodgate/testing/redistest"
	"github.com/floodgate-go/floodgate/tiers"
	"github.com/floodgate-go/floodgate/tiers/redisstore"
)

// redisStore returns a Redis store on its own client of srv, on fake time.
func redisStore(t *testing.T, srv *redistest.Server, clk *clock.Fake) *redisstore.Store {
	t.Helper()
	client, err := redisstore.NewClient("redis://" + srv.Addr())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = client.Close() })
	rs, err := redisstore.New(client, redisstore.WithClock(clk), redisstore.WithMinTTL(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = rs.Close() })
	return rs
}

// The edge (serve-rls over Redis behind the fallback) and a service (its
// own tiers stage on its own Redis client) spend one budget: the same key
// in the same redis-server, whichever charges it.
func TestSharedBudgetWithServiceOnRedis(t *testing.T) {
	srv := redistest.Start(t)
	clk := clock.New(time.Time{})
	edgeStore, err := fallback.New(redisStore(t, srv, clk), fallback.WithClock(clk), fallback.WithLogger(quiet), fallback.WithTimeout(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	e := newEnvStore(t, policy, edgeStore, clk)

	p, err := tiers.Load([]byte(policy))
	if err != nil {
		t.Fatal(err)
	}
	service, err := tiers.NewLimiter(redisStore(t, srv, clk), p)
	if err != nil {
		t.Fatal(err)
	}
	req := &floodgate.Request{Method: "/shop.v1.Cart/Add", Identity: floodgate.Identity{IP: netip.MustParseAddr("192.0.2.1"), Tenant: "acme"}}
	ctx := ctxT(t)

	// The edge spends 2 of the client's 3 per minute...
	if got := remaining(t, e.call(t, "edge", 2, d("remote_address", "192.0.2.1")), 0, ok); got != 1 {
		t.Fatalf("edge: remaining %d, want 1", got)
	}
	// ...the service sees it: one left, then none.
	var ipKey string
	for _, b := range service.Buckets(nil, req) {
		if b.Rule == "per-ip" {
			ipKey = b.Key
		}
	}
	if n, err := srv.Client().Exists(ctx, ipKey).Result(); err != nil || n != 1 {
		t.Fatalf("key %q the service charges: exists %d, %v; the edge did not charge it", ipKey, n, err)
	}
	dec, _, err := service.Admit(ctx, req)
	if err != nil || !dec.Allowed || dec.Policy != "per-ip" || dec.Remaining != 0 {
		t.Fatalf("service: %+v, %v; want allowed by per-ip with 0 left", dec, err)
	}
	if dec, _, _ := service.Admit(ctx, req); dec.Allowed || dec.Policy != "per-ip" {
		t.Fatalf("service: %+v; want denied by per-ip", dec)
	}
	// ...and the edge sees what the service spent at the tenant: the
	// service's allowed call (its denied one charged nothing).
	resp := e.call(t, "edge", 0, d("tenant-id", "acme"), d("remote_address", "192.0.2.1"))
	if resp.OverallCode != over || remaining(t, resp, 0, ok) != 9 {
		t.Fatalf("edge after the service: %v; want OVER_LIMIT at the ip, tenant at 9", resp)
	}
	// The denied call charged nothing in Redis either.
	if got := remaining(t, e.call(t, "edge", 0, hits(d("tenant-id", "acme"), 0)), 0, ok); got != 9 {
		t.Fatalf("tenant: %d left, want 9", got)
	}
	keys, err := srv.Client().Keys(ctx, "*").Result()
	if err != nil {
		t.Fatal(err)
	}
	if len(keys) != 2 {
		t.Fatalf("redis keys %v, want two: the ip's and the tenant's, shared by edge and service", keys)
	}
}

// With Redis gone, the fallback decides: a rule that fails closed denies,
// one that decides locally keeps answering.
func TestRedisDownFallsBack(t *testing.T) {
	srv := redistest.Start(t)
	clk := clock.New(time.Time{})
	store, err := fallback.New(redisStore(t, srv, clk), fallback.WithClock(clk), fallback.WithLogger(quiet), fallback.WithTimeout(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	e := newEnvStore(t, `
rules:
  - {name: local, key: [ip], rate: 3/1m, algorithm: fixed_window}
  - {name: closed, key: [tenant], rate: 3/1m, algorithm: fixed_window, on_store_error: closed}
rls:
  - domain: edge
    descriptors:
      - entries: [{key: remote_address, as: ip}]
        rule: local
      - entries: [{key: tenant, as: tenant}]
        rule: closed
`, store, clk)
	if resp := e.call(t, "edge", 0, d("remote_address", "192.0.2.1"), d("tenant", "acme")); resp.OverallCode != ok {
		t.Fatalf("with Redis: %v", resp)
	}
	srv.Kill()
	resp := e.call(t, "edge", 0, d("remote_address", "192.0.2.1"))
	if resp.OverallCode != ok || resp.Statuses[0].CurrentLimit.GetRequestsPerUnit() != 3 {
		t.Fatalf("local rule without Redis: %v", resp)
	}
	resp = e.call(t, "edge", 0, d("remote_address", "192.0.2.1"), d("tenant", "acme"))
	if resp.OverallCode != over || resp.Statuses[1].Code != over {
		t.Fatalf("closed rule without Redis: %v", resp)
	}
}

// On Redis: a descriptor's limit override with the entries and unit of a
// mapped fixed-window rule counts in that rule's key; a call a deny
// descriptor denies, and one an enforced rule denies, read the other
// descriptors' and the shadow rules' keys without charging them, so
// their answers show their limits.
func TestRedisOverrideDenyAndShadowReads(t *testing.T) {
	srv := redistest.Start(t)
	clk := clock.New(time.Time{})
	e := newEnvStore(t, `
rules:
  - {name: per-ip, key: [ip], rate: 6/1m, algorithm: fixed_window}
  - {name: per-user, key: [user], rate: 1/1m, algorithm: fixed_window}
  - {name: watch, key: [tenant], rate: 1/1m, algorithm: fixed_window, shadow: true}
rls:
  - domain: edge
    descriptors:
      - {entries: [{key: remote_address, as: ip}], rule: per-ip}
      - {entries: [{key: user, as: user}], rule: per-user}
      - {entries: [{key: tenant, as: tenant}], rule: watch}
      - {entries: [{key: blocked}], deny: {window: 1m}, name: blocked}
`, redisStore(t, srv, clk), clk)
	ctx := ctxT(t)
	for range 3 {
		e.call(t, "edge", 0, overridden(d("remote_address", "192.0.2.30"), 10, typev3.RateLimitUnit_MINUTE))
	}
	resp := e.call(t, "edge", 0, d("remote_address", "192.0.2.30"))
	if got := remaining(t, resp, 0, ok); got != 2 || resp.Statuses[0].CurrentLimit.GetRequestsPerUnit() != 6 {
		t.Fatalf("the configured limit after 3 override hits: %v; want 2 remaining of 6", resp.Statuses[0])
	}
	keys, err := srv.Client().Keys(ctx, "*").Result()
	if err != nil || len(keys) != 1 {
		t.Fatalf("redis keys %v, %v; want one, shared by the override and the rule", keys, err)
	}

	resp = e.call(t, "edge", 0, d("blocked", "x"), d("remote_address", "192.0.2.30"), d("tenant", "acme"))
	if resp.OverallCode != over || resp.Statuses[0].Code != over {
		t.Fatalf("blocked: %v", resp)
	}
	if st := resp.Statuses[1]; st.Code != ok || st.LimitRemaining != 2 || st.CurrentLimit.GetRequestsPerUnit() != 6 {
		t.Fatalf("beside the deny: %v; want OK, 6 per minute, 2 remaining", st)
	}
	if got := remaining(t, e.call(t, "edge", 0, hits(d("remote_address", "192.0.2.30"), 0)), 0, ok); got != 2 {
		t.Fatalf("after the denied call: %d remaining, want 2: nothing charged", got)
	}

	e.call(t, "edge", 0, d("user", "u1"), d("tenant", "acme"))
	resp = e.call(t, "edge", 0, d("user", "u1"), d("tenant", "acme"))
	if resp.OverallCode != over || resp.Statuses[0].Code != over {
		t.Fatalf("user over its limit: %v", resp)
	}
	if st := resp.Statuses[1]; st.Code != ok || st.CurrentLimit.GetRequestsPerUnit() != 1 {
		t.Fatalf("shadow over its limit beside a deny: %v; want OK naming 1 per minute", st)
	}
}
