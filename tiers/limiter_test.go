package tiers_test

import (
	"context"
	"errors"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/quota"
	"github.com/floodgate-go/floodgate/testing/clock"
	"github.com/floodgate-go/floodgate/tiers"
	"github.com/floodgate-go/floodgate/tiers/memstore"
)

var _ floodgate.Admitter = (*tiers.Limiter)(nil)

// remaining reads every bucket r resolves to without charging it (a Take
// of cost 0 on memstore reads the bucket) and returns key -> remaining.
func remaining(t *testing.T, s quota.Store, l *tiers.Limiter, r *floodgate.Request) map[string]int64 {
	t.Helper()
	bs := l.Buckets(nil, r)
	for i := range bs {
		bs[i].Cost = 0
	}
	res := make([]quota.Result, len(bs))
	if _, err := s.Take(context.Background(), bs, res); err != nil {
		t.Fatalf("peek: %v", err)
	}
	out := make(map[string]int64, len(bs))
	for i, b := range bs {
		out[b.Key] = res[i].Remaining
	}
	return out
}

func admit(t *testing.T, l *tiers.Limiter, r *floodgate.Request) floodgate.Decision {
	t.Helper()
	d, done, err := l.Admit(context.Background(), r)
	if err != nil {
		t.Fatalf("Admit: %v", err)
	}
	if done != nil {
		t.Fatalf("Admit returned a Done; the tiers stage holds nothing")
	}
	return d
}

const hierarchy = `
rules:
  - {name: user, key: [user], rate: 10/1s}
  - {name: ip, key: [ip], rate: 10/1s}
  - {name: tenant, key: [tenant], rate: 2/1m}
`

// When the tenant level denies, the user and IP buckets keep exactly what
// they had: nothing is charged anywhere.
func TestAllOrNothing(t *testing.T) {
	clk := clock.New(time.Time{})
	s := newMemstore(t, memstore.WithClock(clk))
	l := mustLimiter(t, s, hierarchy)
	r := &floodgate.Request{Method: "/a.B/C", Identity: floodgate.Identity{User: "bob", Tenant: "acme", IP: netip.MustParseAddr("192.0.2.1")}}

	for i := range 2 {
		if d := admit(t, l, r); !d.Allowed {
			t.Fatalf("request %d denied: %+v", i, d)
		}
	}
	before := remaining(t, s, l, r)
	want := map[string]int64{
		"fg:{user=bob}:user:token_bucket":      8,
		"fg:{ip=192.0.2.1}:ip:token_bucket":    8,
		"fg:{tenant=acme}:tenant:token_bucket": 0,
	}
	for k, v := range want {
		if before[k] != v {
			t.Fatalf("before the deny: %s remaining %d, want %d (all: %v)", k, before[k], v, before)
		}
	}
	d := admit(t, l, r)
	if d.Allowed || d.Policy != "tenant" || d.RetryAfter != 30*time.Second || d.Remaining != 0 || d.Limit != 2 || d.Window != time.Minute {
		t.Fatalf("third request: %+v, want a deny by tenant, retry after exactly 30s", d)
	}
	after := remaining(t, s, l, r)
	for k, v := range want {
		if after[k] != v {
			t.Errorf("after the deny: %s remaining %d, want %d unchanged", k, after[k], v)
		}
	}

	// Another tenant, same user and IP: allowed, charged at every level.
	r2 := *r
	r2.Identity.Tenant = "globex"
	if d := admit(t, l, &r2); !d.Allowed || d.Policy != "tenant" || d.Remaining != 1 {
		t.Fatalf("other tenant: %+v, want allowed with tenant binding at 1 remaining", d)
	}
	got := remaining(t, s, l, &r2)
	if got["fg:{user=bob}:user:token_bucket"] != 7 || got["fg:{ip=192.0.2.1}:ip:token_bucket"] != 7 {
		t.Errorf("after the other tenant's request: %v, want user and ip at 7", got)
	}
}

// On allow the bucket with the least remaining binds, ties going to the
// most specific; on deny the denying bucket with the longest retry-after.
func TestBindingBucket(t *testing.T) {
	clk := clock.New(time.Time{})
	s := newMemstore(t, memstore.WithClock(clk))
	l := mustLimiter(t, s, `
rules:
  - {name: tenant, key: [tenant], rate: 3/1s}
  - {name: both, key: [tenant, user], rate: 3/1m}
  - {name: user, key: [user], rate: 5/1s}
`)
	r := &floodgate.Request{Method: "/a.B/C", Identity: floodgate.Identity{User: "u", Tenant: "t"}}
	// both and tenant tie at 2 remaining: both (two scopes) is more specific.
	if d := admit(t, l, r); !d.Allowed || d.Policy != "both" || d.Remaining != 2 || d.Limit != 3 || d.Window != time.Minute || d.Source != floodgate.SourceStore || d.Stage != floodgate.StageTiers {
		t.Fatalf("first: %+v", d)
	}
	admit(t, l, r)
	admit(t, l, r)
	// Now tenant (3/1s: retry 333334µs) and both (3/1m: retry 20s) deny;
	// both binds with the longer wait.
	d := admit(t, l, r)
	if d.Allowed || d.Policy != "both" || d.RetryAfter != 20*time.Second {
		t.Fatalf("fourth: %+v, want deny by both after 20s", d)
	}
	clk.Advance(time.Second)
	d = admit(t, l, r)
	if d.Allowed || d.Policy != "both" || d.RetryAfter != 19*time.Second {
		t.Fatalf("after 1s: %+v, want deny by both after 19s", d)
	}
}

func TestCostPrecedence(t *testing.T) {
	clk := clock.New(time.Time{})
	s := newMemstore(t, memstore.WithClock(clk))
	l := mustLimiter(t, s, `
rules:
  - {name: fixed, key: [user], rate: 100/1s, cost: 7}
  - {name: plain, key: [user], rate: 100/1s}
methods:
  /a.B/Export: {cost: 5, priority: read}
`)
	for _, tc := range []struct {
		method          string
		reqCost         int64
		fixed, plain    int64
		wantMethodOpts  bool
		wantMethodCost  int64
		wantMethodPrior floodgate.Priority
	}{
		{"/a.B/C", 0, 7, 1, false, 0, 0},
		{"/a.B/C", 3, 7, 3, false, 0, 0},
		// The policy's methods: reach Request.Cost through the transport
		// (package interceptor resolves them first); the Limiter charges
		// the request's cost as given.
		{"/a.B/Export", 0, 7, 1, true, 5, floodgate.PriorityRead},
		{"/a.B/Export", 2, 7, 2, true, 5, floodgate.PriorityRead},
	} {
		bs := l.Buckets(nil, &floodgate.Request{Method: tc.method, Cost: tc.reqCost, Identity: floodgate.Identity{User: "u"}})
		if len(bs) != 2 || bs[0].Cost != tc.fixed || bs[1].Cost != tc.plain {
			t.Errorf("%s cost %d: buckets %+v, want costs %d and %d", tc.method, tc.reqCost, bs, tc.fixed, tc.plain)
		}
		mo, ok := l.MethodOptions(tc.method)
		if ok != tc.wantMethodOpts || mo.Cost != tc.wantMethodCost || mo.Priority != tc.wantMethodPrior {
			t.Errorf("MethodOptions(%s) = %+v, %v", tc.method, mo, ok)
		}
	}
}

// A request whose annotated cost exceeds a rule's capacity can never pass:
// it is denied with RetryAfter 0 and ErrCostExceedsCapacity, and nothing
// is charged.
func TestCostExceedsCapacity(t *testing.T) {
	clk := clock.New(time.Time{})
	s := newMemstore(t, memstore.WithClock(clk))
	l := mustLimiter(t, s, `
rules:
  - {name: small, key: [user], rate: 10/1s, burst: 5}
  - {name: big, key: [user], rate: 100/1s}
`)
	r := &floodgate.Request{Method: "/a.B/C", Cost: 6, Identity: floodgate.Identity{User: "u"}}
	before := remaining(t, s, l, r)
	d, done, err := l.Admit(context.Background(), r)
	if !errors.Is(err, tiers.ErrCostExceedsCapacity) || done != nil {
		t.Fatalf("err = %v, want ErrCostExceedsCapacity", err)
	}
	if d.Allowed || d.Policy != "small" || d.RetryAfter != 0 || d.Limit != 5 {
		t.Fatalf("decision %+v, want deny by small with RetryAfter 0", d)
	}
	after := remaining(t, s, l, r)
	for k, v := range before {
		if after[k] != v {
			t.Errorf("%s: remaining %d -> %d, want unchanged", k, v, after[k])
		}
	}
	// Cost 5 fits: allowed, and charged to both levels.
	r.Cost = 5
	if d := admit(t, l, r); !d.Allowed || d.Policy != "small" || d.Remaining != 0 {
		t.Fatalf("cost 5: %+v", d)
	}
	// Cost > burst but <= capacity after refill is a plain deny with a
	// retry-after: 1 token short at 10/s is 100ms.
	clk.Advance(400 * time.Millisecond)
	if d := admit(t, l, r); d.Allowed || d.RetryAfter != 100*time.Millisecond {
		t.Fatalf("cost 5 with 4 tokens: %+v, want deny after 100ms", d)
	}
	r.Cost = -1
	if d, _, err := l.Admit(context.Background(), r); d.Allowed || !errors.Is(err, tiers.ErrInvalidCost) {
		t.Errorf("negative cost: %+v, %v", d, err)
	}
}

// Shadow rules are decided in their own Take, after the real rules allow:
// they never deny, never block real rules, and charge nothing when they
// would deny.
func TestShadow(t *testing.T) {
	clk := clock.New(time.Time{})
	s := newMemstore(t, memstore.WithClock(clk))
	l := mustLimiter(t, s, `
rules:
  - {name: real, key: [user], rate: 3/1m}
  - {name: dry, key: [user, ip], rate: 1/1m, shadow: true}
`)
	r := &floodgate.Request{Method: "/a.B/C", Identity: floodgate.Identity{User: "u", IP: netip.MustParseAddr("192.0.2.9")}}
	const realKey, dryKey = "fg:{user=u}:real:token_bucket", "fg:{user=u}:dry:ip=192.0.2.9:token_bucket"
	d := admit(t, l, r)
	if !d.Allowed || d.Shadow || d.Policy != "real" || d.Remaining != 2 {
		t.Fatalf("first: %+v, want allowed by real at 2 (shadow allowed too)", d)
	}
	if got := remaining(t, s, l, r); got[realKey] != 2 || got[dryKey] != 0 {
		t.Fatalf("after first: %v", got)
	}
	d = admit(t, l, r)
	if !d.Allowed || !d.Shadow || d.Policy != "dry" || d.RetryAfter != 0 {
		t.Fatalf("second: %+v, want allowed with Shadow naming dry", d)
	}
	d = admit(t, l, r)
	if !d.Allowed || !d.Shadow {
		t.Fatalf("third: %+v", d)
	}
	if got := remaining(t, s, l, r); got[realKey] != 0 || got[dryKey] != 0 {
		t.Fatalf("after third: %v, want real charged to 0", got)
	}
	// The real rule denies: the shadow rule is not consulted.
	d = admit(t, l, r)
	if d.Allowed || d.Shadow || d.Policy != "real" {
		t.Fatalf("fourth: %+v, want a real deny", d)
	}
	// After 1 minute both refilled; the shadow bucket was never charged by
	// denied or shadow-denied requests, so it allows exactly one.
	clk.Advance(time.Minute)
	if d := admit(t, l, r); !d.Allowed || d.Shadow {
		t.Fatalf("after a minute: %+v", d)
	}
}

func TestNoRuleMatchesNoStoreCall(t *testing.T) {
	// A store that fails every Take: a store call
	// would show as an error and a fail-open source.
	broken := failingStore{errors.New("store down")}
	l := mustLimiter(t, broken, `
rules:
  - {name: search, match: {method: "/search.v1.Search/*"}, rate: 1/1s}
  - {name: users, key: [user], rate: 1/1s}
`)
	d, done, err := l.Admit(context.Background(), &floodgate.Request{Method: "/other.v1.Svc/Get", Priority: floodgate.PriorityRead})
	if err != nil || done != nil || !d.Allowed || d.Policy != "" || d.Source != "" || d.Stage != floodgate.StageTiers || d.Priority != floodgate.PriorityRead {
		t.Fatalf("Admit = %+v, %v, want allowed with no policy and no store call", d, err)
	}
}

func TestTiersAndOverrides(t *testing.T) {
	clk := clock.New(time.Time{})
	s := newMemstore(t, memstore.WithClock(clk))
	l := mustLimiter(t, s, `
tiers:
  free: {rate: 2/1h}
  pro: {rate: 4/1h, algorithm: gcra}
default_tier: free
rules:
  - {name: plan, key: [tenant], rate: tier}
overrides:
  - {rule: plan, key: {tenant: acme}, rate: 6/1h}
`)
	count := func(tenant, tier string) int {
		n := 0
		for range 10 {
			if admit(t, l, &floodgate.Request{Method: "/a.B/C", Tier: tier, Identity: floodgate.Identity{Tenant: tenant}}).Allowed {
				n++
			}
		}
		return n
	}
	for _, tc := range []struct {
		tenant, tier string
		want         int
	}{
		{"a", "free", 2}, {"b", "", 2}, {"c", "no-such-tier", 2}, {"d", "pro", 4}, {"acme", "pro", 6},
	} {
		if got := count(tc.tenant, tc.tier); got != tc.want {
			t.Errorf("tenant %s tier %q: %d of 10 allowed, want exactly %d", tc.tenant, tc.tier, got, tc.want)
		}
	}
}

// SetPolicy swaps atomically under concurrent Admit (run with -race), and
// a bad policy leaves the old one deciding.
func TestSetPolicyUnderLoad(t *testing.T) {
	s := newMemstore(t, memstore.WithClock(clock.New(time.Time{})))
	l := mustLimiter(t, s, "rules:\n  - {name: a, key: [user], rate: 1000000/1s}\n")
	pa, pb := l.Policy(), mustLoad(t, "rules:\n  - {name: b, key: [user], rate: 1000000/1s}\n")
	var wg sync.WaitGroup
	stop := make(chan struct{})
	errs := make(chan error, 4)
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := &floodgate.Request{Method: "/a.B/C", Identity: floodgate.Identity{User: string(rune('a' + w))}}
			for i := 0; i < 20000; i++ {
				select {
				case <-stop:
					return
				default:
				}
				d, _, err := l.Admit(context.Background(), r)
				if err != nil || !d.Allowed || (d.Policy != "a" && d.Policy != "b") {
					errs <- errors.New("bad decision during swap: " + d.Policy)
					return
				}
			}
		}()
	}
	for i := range 200 {
		p := pa
		if i%2 == 1 {
			p = pb
		}
		if err := l.SetPolicy(p); err != nil {
			t.Fatal(err)
		}
	}
	close(stop)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if err := l.SetPolicy(&tiers.Policy{Rules: []tiers.Rule{{Name: "bad name"}}}); err == nil {
		t.Fatal("SetPolicy accepted a bad policy")
	}
	if l.Policy() != pb {
		t.Errorf("a rejected SetPolicy replaced the policy in force")
	}
}

// Concurrent callers sharing a tenant bucket get exactly its capacity, no
// more, however their Takes interleave.
func TestConcurrentExactCount(t *testing.T) {
	clk := clock.New(time.Time{})
	s := newMemstore(t, memstore.WithClock(clk))
	l := mustLimiter(t, s, hierarchy+"  - {name: global, rate: 40/1h}\n")
	var (
		wg      sync.WaitGroup
		mu      sync.Mutex
		allowed = map[string]int{}
	)
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 50 {
				r := &floodgate.Request{Method: "/a.B/C", Identity: floodgate.Identity{
					User: "u" + string(rune('a'+w)) + string(rune('a'+i%5)), Tenant: "t" + string(rune('a'+i%60/2)),
					IP: netip.AddrFrom4([4]byte{10, 0, byte(w), byte(i)})}}
				d, _, err := l.Admit(context.Background(), r)
				if err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				if d.Allowed {
					allowed["all"]++
				} else {
					allowed[d.Policy]++
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	// 200 requests from 25 tenants (8 each, 2/1m per tenant: at most 50
	// could pass the tenant level), all through one global 40/1h bucket:
	// exactly 40 are admitted, whatever the interleaving, and requests a
	// tenant denies never spend global quota.
	if got := allowed["all"]; got != 40 {
		t.Errorf("allowed %d, want exactly 40: %v", got, allowed)
	}
	if allowed["all"]+allowed["tenant"]+allowed["global"] != 200 {
		t.Errorf("decisions %v do not add up to 200", allowed)
	}
}

// TestShadowFirstIndices: a shadow rule sorted before the real ones
// (more key scopes) separates the real Take from the matched rules'
// order; decisions must still name the bucket that bound.
func TestShadowFirstIndices(t *testing.T) {
	clk := clock.New(time.Time{})
	s := newMemstore(t, memstore.WithClock(clk))
	l := mustLimiter(t, s, `
rules:
  - {name: global, rate: 9/1m}
  - {name: dry, key: [user, ip], rate: 2/1m, shadow: true}
  - {name: per-user, key: [user], rate: 6/2m}
`)
	r := &floodgate.Request{Method: "/a.B/C", Identity: floodgate.Identity{User: "u", IP: netip.MustParseAddr("192.0.2.9")}}
	if d := admit(t, l, r); !d.Allowed || d.Shadow || d.Policy != "per-user" || d.Remaining != 5 || d.Window != 2*time.Minute || d.Limit != 6 {
		t.Fatalf("first: %+v, want allowed bound by per-user (5 of 6 left per 2m)", d)
	}
	// Cost 3 exceeds the shadow rule's capacity 2: the real rules decide
	// and charge, the shadow rule reports the request it would deny.
	r.Cost = 3
	if d := admit(t, l, r); !d.Allowed || !d.Shadow || d.Policy != "dry" || d.Limit != 2 || d.RetryAfter != 0 {
		t.Fatalf("cost 3: %+v, want allowed with Shadow naming dry", d)
	}
	// Another user: its per-user bucket is fresh, global binds.
	v := &floodgate.Request{Method: "/a.B/C", Identity: floodgate.Identity{User: "v", IP: netip.MustParseAddr("192.0.2.9")}}
	if d := admit(t, l, v); !d.Allowed || d.Shadow || d.Policy != "global" || d.Remaining != 4 || d.Window != time.Minute || d.Limit != 9 {
		t.Fatalf("user v: %+v, want allowed bound by global (4 of 9 left)", d)
	}
	r.Cost = 1
	if d := admit(t, l, r); !d.Allowed || d.Shadow || d.Policy != "per-user" || d.Remaining != 1 {
		t.Fatalf("fourth: %+v, want allowed bound by per-user (1 left)", d)
	}
	// per-user has 1 left for a cost of 2: a real deny by per-user, one
	// token short at 6 per 2m.
	r.Cost = 2
	if d := admit(t, l, r); d.Allowed || d.Shadow || d.Policy != "per-user" || d.RetryAfter != 20*time.Second {
		t.Fatalf("fifth: %+v, want a deny by per-user retrying after 20s", d)
	}
}

// TestStoreErrorShadowFirst: with a shadow rule first, the fail mode of
// the real rule that fails closed still decides.
func TestStoreErrorShadowFirst(t *testing.T) {
	broken := failingStore{errors.New("store down")}
	l := mustLimiter(t, broken, `
rules:
  - {name: all, rate: 100/1s, on_store_error: open}
  - {name: dry, key: [user], rate: 1/1s, shadow: true, on_store_error: closed}
  - {name: login, rate: 5/1m, on_store_error: closed}
`)
	d, _, err := l.Admit(context.Background(), &floodgate.Request{Method: "/a.B/C", Identity: floodgate.Identity{User: "u"}})
	if err == nil || !errors.Is(err, broken.err) {
		t.Fatalf("err = %v, want the store's error wrapped", err)
	}
	if d.Allowed || d.Source != floodgate.SourceFailClosed || d.Policy != "login" || d.Window != time.Minute || d.Limit != 5 {
		t.Fatalf("%+v, want fail-closed deny by login", d)
	}
}
