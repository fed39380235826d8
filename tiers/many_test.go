package tiers_test

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/quota"
	"github.com/floodgate-go/floodgate/testing/clock"
	"github.com/floodgate-go/floodgate/tiers"
	"github.com/floodgate-go/floodgate/tiers/memstore"
)

// manyRec records the buckets of every Take it passes on to s.
type manyRec struct {
	s     quota.Store
	mu    sync.Mutex
	takes [][]quota.Bucket
}

func (r *manyRec) Take(ctx context.Context, bs []quota.Bucket, res []quota.Result) (bool, error) {
	r.mu.Lock()
	r.takes = append(r.takes, slices.Clone(bs))
	r.mu.Unlock()
	return r.s.Take(ctx, bs, res)
}

// DecidesOnStoreError: the memstore behind has no backend to lose.
func (r *manyRec) DecidesOnStoreError() bool { return true }

// costs returns the keys and costs of every take so far, one map per take.
func (r *manyRec) costs() []map[string]int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]map[string]int64, len(r.takes))
	for i, t := range r.takes {
		out[i] = map[string]int64{}
		for _, b := range t {
			out[i][b.Key] = b.Cost
		}
	}
	return out
}

func (r *manyRec) reset() {
	r.mu.Lock()
	r.takes = nil
	r.mu.Unlock()
}

const manyPolicy = `
rules:
  - {name: per-user, key: [user], rate: 5/1m, algorithm: fixed_window}
  - {name: per-ip, key: [ip], rate: 3/1m, algorithm: fixed_window}
  - {name: per-tenant, key: [tenant], rate: 100/1m, algorithm: fixed_window}
  - {name: dry, key: [tenant], rate: 1/1m, algorithm: fixed_window, shadow: true}
`

func newMany(t *testing.T, policy string) (*tiers.Limiter, *manyRec, *clock.Fake) {
	t.Helper()
	clk := clock.New(time.Time{})
	p, err := tiers.Load([]byte(policy))
	if err != nil {
		t.Fatal(err)
	}
	rs := &manyRec{s: newMemstore(t, memstore.WithClock(clk))}
	l, err := tiers.NewLimiter(rs, p)
	if err != nil {
		t.Fatal(err)
	}
	return l, rs, clk
}

func manyUser(u string) *floodgate.Request {
	return &floodgate.Request{Method: "/x.v1.X/Y", Identity: floodgate.Identity{User: u}}
}

func manyIP(a string) *floodgate.Request {
	return &floodgate.Request{Method: "/x.v1.X/Y", Identity: floodgate.Identity{IP: netip.MustParseAddr(a)}}
}

// peek reads a request's buckets at rule without charging (AdmitMany's
// Peek) and returns the remaining of its binding bucket.
func manyPeek(t *testing.T, l *tiers.Limiter, r *floodgate.Request, rule string) int64 {
	t.Helper()
	var out [1]floodgate.Decision
	if _, err := l.AdmitMany(context.Background(), []tiers.Item{{Request: r, Rule: rule, Peek: true}}, out[:]); err != nil {
		t.Fatal(err)
	}
	if out[0].Policy != rule {
		t.Fatalf("peek at %s bound %q", rule, out[0].Policy)
	}
	return out[0].Remaining
}

// A deny at one item charges none of the others: the IP bucket allows 3,
// so a fourth call with a fresh user denies at the IP and the user and
// tenant buckets of every item keep what they had.
func TestAdmitManyDenyChargesNothing(t *testing.T) {
	l, rs, _ := newMany(t, manyPolicy)
	ctx := context.Background()
	out := make([]floodgate.Decision, 2)
	for i := range 3 {
		items := []tiers.Item{{Request: manyUser("alice"), Rule: "per-user"}, {Request: manyIP("192.0.2.1"), Rule: "per-ip"}}
		d, err := l.AdmitMany(ctx, items, out)
		if err != nil || !d.Allowed {
			t.Fatalf("call %d: %+v, %v", i, d, err)
		}
	}
	if got := manyPeek(t, l, manyUser("alice"), "per-user"); got != 2 {
		t.Fatalf("alice has %d left after 3 calls, want 2", got)
	}
	rs.reset()
	items := []tiers.Item{{Request: manyUser("alice"), Rule: "per-user"}, {Request: manyIP("192.0.2.1"), Rule: "per-ip"}}
	d, err := l.AdmitMany(ctx, items, out)
	if err != nil {
		t.Fatal(err)
	}
	if d.Allowed || d.Policy != "per-ip" || d.RetryAfter <= 0 {
		t.Fatalf("call 4: %+v, want a deny by per-ip with a retry-after", d)
	}
	if !out[0].Allowed || out[0].Policy != "per-user" || out[0].Remaining != 2 {
		t.Errorf("the user item: %+v, want allowed by itself, 2 left (nothing charged)", out[0])
	}
	if out[1].Allowed || out[1].Policy != "per-ip" || out[1].Remaining != 0 {
		t.Errorf("the ip item: %+v, want denied by per-ip", out[1])
	}
	// One take for the real rules; the shadow take is never made on a deny.
	if takes := rs.costs(); len(takes) != 1 || len(takes[0]) != 2 {
		t.Fatalf("takes %v, want one of two buckets", takes)
	}
	if got := manyPeek(t, l, manyUser("alice"), "per-user"); got != 2 {
		t.Fatalf("alice has %d left after the denied call, want 2 (nothing charged)", got)
	}
}

// Items that resolve to the same bucket are merged into one, charged the
// sum of their costs; a sum above the capacity denies (waiting cannot
// cure it: RetryAfter 0) with ErrCostExceedsCapacity.
func TestAdmitManyMergesDuplicates(t *testing.T) {
	l, rs, _ := newMany(t, manyPolicy)
	ctx := context.Background()
	a := manyUser("alice")
	a2 := manyUser("alice")
	a2.Cost = 2
	out := make([]floodgate.Decision, 3)
	d, err := l.AdmitMany(ctx, []tiers.Item{{Request: a, Rule: "per-user"}, {Request: a2, Rule: "per-user"}, {Request: manyUser("bob"), Rule: "per-user"}}, out)
	if err != nil || !d.Allowed {
		t.Fatalf("%+v, %v", d, err)
	}
	takes := rs.costs()
	want := map[string]int64{"fg:{user=alice}:per-user:fixed_window": 3, "fg:{user=bob}:per-user:fixed_window": 1}
	if len(takes) != 1 || !manyEqual(takes[0], want) {
		t.Fatalf("takes %v, want one take %v", takes, want)
	}
	if out[0].Remaining != 2 || out[1].Remaining != 2 || out[2].Remaining != 4 {
		t.Errorf("remaining %d %d %d, want 2 2 4 (alice's two items share one bucket)", out[0].Remaining, out[1].Remaining, out[2].Remaining)
	}
	// 2 left; 1 + 2 = 3 in one call exceeds nothing yet but the bucket: deny.
	rs.reset()
	d, err = l.AdmitMany(ctx, []tiers.Item{{Request: a, Rule: "per-user"}, {Request: a2, Rule: "per-user"}}, out)
	if err != nil || d.Allowed || d.Policy != "per-user" {
		t.Fatalf("%+v, %v: want a deny by per-user", d, err)
	}
	// A merged cost above the capacity (5) can never pass.
	big := manyUser("carol")
	big.Cost = 3
	d, err = l.AdmitMany(ctx, []tiers.Item{{Request: big, Rule: "per-user"}, {Request: big, Rule: "per-user"}}, out)
	if !errors.Is(err, tiers.ErrCostExceedsCapacity) || d.Allowed || d.RetryAfter != 0 || out[0].RetryAfter != 0 {
		t.Fatalf("%+v, %v: want a deny with RetryAfter 0 and ErrCostExceedsCapacity", d, err)
	}
	if got := manyPeek(t, l, manyUser("carol"), "per-user"); got != 5 {
		t.Fatalf("carol has %d left, want 5", got)
	}
}

func manyEqual(a, b map[string]int64) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

// Without Rule an item is every rule its request matches, as Admit; with
// Rule, that rule alone. Peek charges nothing.
func TestAdmitManyRuleAndPeek(t *testing.T) {
	l, rs, _ := newMany(t, manyPolicy)
	ctx := context.Background()
	r := &floodgate.Request{Identity: floodgate.Identity{User: "u", Tenant: "t", IP: netip.MustParseAddr("192.0.2.7")}}
	out := make([]floodgate.Decision, 1)
	if _, err := l.AdmitMany(ctx, []tiers.Item{{Request: r}}, out); err != nil {
		t.Fatal(err)
	}
	takes := rs.costs()
	if len(takes) != 2 || len(takes[0]) != 3 || len(takes[1]) != 1 {
		t.Fatalf("takes %v, want the 3 real rules, then the shadow rule", takes)
	}
	rs.reset()
	if _, err := l.AdmitMany(ctx, []tiers.Item{{Request: r, Rule: "per-tenant"}}, out); err != nil {
		t.Fatal(err)
	}
	if takes := rs.costs(); len(takes) != 1 || !manyEqual(takes[0], map[string]int64{"fg:{tenant=t}:per-tenant:fixed_window": 1}) {
		t.Fatalf("takes %v, want per-tenant alone", takes)
	}
	rs.reset()
	if _, err := l.AdmitMany(ctx, []tiers.Item{{Request: r, Rule: "per-ip", Peek: true}}, out); err != nil {
		t.Fatal(err)
	}
	if takes := rs.costs(); len(takes) != 1 || !manyEqual(takes[0], map[string]int64{"fg:{ip=192.0.2.7}:per-ip:fixed_window": 0}) {
		t.Fatalf("takes %v, want per-ip at cost 0", takes)
	}
	if out[0].Remaining != 2 {
		t.Fatalf("peek says %d left, want 2 (one call charged it)", out[0].Remaining)
	}
	_, err := l.AdmitMany(ctx, []tiers.Item{{Request: r, Rule: "nope"}}, out)
	if !errors.Is(err, tiers.ErrUnknownRule) {
		t.Fatalf("unknown rule: %v", err)
	}
}

// A shadow rule that would deny leaves the call allowed, reported with
// Shadow; a real deny leaves the shadow rule untouched.
func TestAdmitManyShadow(t *testing.T) {
	l, rs, _ := newMany(t, manyPolicy)
	ctx := context.Background()
	ten := &floodgate.Request{Identity: floodgate.Identity{Tenant: "t"}}
	out := make([]floodgate.Decision, 2)
	d, err := l.AdmitMany(ctx, []tiers.Item{{Request: ten, Rule: "dry"}}, out)
	if err != nil || !d.Allowed || d.Shadow || out[0].Policy != "" {
		t.Fatalf("first: %+v %+v, %v: want allowed with nothing binding", d, out[0], err)
	}
	d, err = l.AdmitMany(ctx, []tiers.Item{{Request: ten, Rule: "dry"}, {Request: ten, Rule: "per-tenant"}}, out)
	if err != nil || !d.Allowed || !d.Shadow || d.Policy != "dry" {
		t.Fatalf("second: %+v, %v: want allowed, Shadow by dry", d, err)
	}
	if !out[0].Shadow || !out[0].Allowed || out[1].Shadow || out[1].Policy != "per-tenant" || out[1].Remaining != 99 {
		t.Fatalf("items %+v / %+v", out[0], out[1])
	}
	// Exhaust the IP bucket, then a call of the IP and the shadow rule
	// denies and never takes the shadow rule.
	for range 3 {
		if d, _ := l.AdmitMany(ctx, []tiers.Item{{Request: manyIP("192.0.2.9"), Rule: "per-ip"}}, out); !d.Allowed {
			t.Fatal("setup denied")
		}
	}
	rs.reset()
	d, _ = l.AdmitMany(ctx, []tiers.Item{{Request: manyIP("192.0.2.9"), Rule: "per-ip"}, {Request: ten, Rule: "dry"}}, out)
	if d.Allowed || len(rs.costs()) != 1 {
		t.Fatalf("%+v, takes %v: want a deny and one take", d, rs.costs())
	}
	if !out[1].Allowed || out[1].Policy != "" {
		t.Fatalf("the shadow item of a denied call: %+v, want allowed, not consulted", out[1])
	}
}

// When the store fails, each rule's on_store_error decides, and the error
// is returned.
func TestAdmitManyStoreError(t *testing.T) {
	p, err := tiers.Load([]byte(`
rules:
  - {name: open, key: [user], rate: 5/1m, on_store_error: open}
  - {name: closed, key: [ip], rate: 5/1m, on_store_error: closed}
`))
	if err != nil {
		t.Fatal(err)
	}
	boom := errors.New("boom")
	l, err := tiers.NewLimiter(failingStore{boom}, p)
	if err != nil {
		t.Fatal(err)
	}
	out := make([]floodgate.Decision, 2)
	d, err := l.AdmitMany(context.Background(), []tiers.Item{{Request: manyUser("u"), Rule: "open"}}, out)
	if !errors.Is(err, boom) || !d.Allowed || d.Source != floodgate.SourceFailOpen {
		t.Fatalf("open: %+v, %v", d, err)
	}
	d, err = l.AdmitMany(context.Background(), []tiers.Item{{Request: manyUser("u"), Rule: "open"}, {Request: manyIP("192.0.2.1"), Rule: "closed"}}, out)
	if !errors.Is(err, boom) || d.Allowed || d.Source != floodgate.SourceFailClosed || d.RetryAfter != quota.StoreErrorRetryAfter {
		t.Fatalf("closed: %+v, %v", d, err)
	}
	if !out[0].Allowed || out[1].Allowed {
		t.Fatalf("items %+v %+v", out[0], out[1])
	}
}

// The policy's address lists apply per item: an exempt item charges
// nothing, a denied one denies the call before any take.
func TestAdmitManyAddressLists(t *testing.T) {
	l, rs, _ := newMany(t, manyPolicy+`
exempt: [198.51.100.0/24]
deny: [203.0.113.0/24]
`)
	ctx := context.Background()
	out := make([]floodgate.Decision, 2)
	d, err := l.AdmitMany(ctx, []tiers.Item{{Request: manyIP("198.51.100.4"), Rule: "per-ip"}, {Request: manyUser("u"), Rule: "per-user"}}, out)
	if err != nil || !d.Allowed || out[0].Policy != tiers.PolicyExempt {
		t.Fatalf("exempt: %+v %+v, %v", d, out[0], err)
	}
	if takes := rs.costs(); len(takes) != 1 || len(takes[0]) != 1 {
		t.Fatalf("takes %v, want the user's bucket alone", takes)
	}
	rs.reset()
	d, err = l.AdmitMany(ctx, []tiers.Item{{Request: manyUser("u"), Rule: "per-user"}, {Request: manyIP("203.0.113.4"), Rule: "per-ip"}}, out)
	if err != nil || d.Allowed || d.Policy != tiers.PolicyDeny || len(rs.costs()) != 0 {
		t.Fatalf("deny: %+v, %v, takes %v", d, err, rs.costs())
	}
	neg := manyUser("n")
	neg.Cost = -1
	if _, err := l.AdmitMany(ctx, []tiers.Item{{Request: neg}}, out); !errors.Is(err, tiers.ErrInvalidCost) {
		t.Fatalf("negative cost: %v", err)
	}
}

// AdmitMany allocates nothing per call once its keys are interned.
func TestAdmitManyAllocations(t *testing.T) {
	if raceEnabled {
		t.Skip("allocation counts mean nothing under the race detector")
	}
	p, err := tiers.Load([]byte(`
rules:
  - {name: per-user, key: [user], rate: 1000000/1s}
  - {name: per-ip, key: [ip], rate: 1000000/1s}
  - {name: per-tenant, key: [tenant], rate: 1000000/1s}
`))
	if err != nil {
		t.Fatal(err)
	}
	l, err := tiers.NewLimiter(newMemstore(t), p)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	items := []tiers.Item{{Request: manyUser("a"), Rule: "per-user"}, {Request: manyIP("192.0.2.1"), Rule: "per-ip"},
		{Request: &floodgate.Request{Identity: floodgate.Identity{Tenant: "t"}}, Rule: "per-tenant"}, {Request: manyUser("a"), Rule: "per-user"}}
	out := make([]floodgate.Decision, len(items))
	if _, err := l.AdmitMany(ctx, items, out); err != nil {
		t.Fatal(err)
	}
	if n := testing.AllocsPerRun(200, func() {
		if d, _ := l.AdmitMany(ctx, items, out); !d.Allowed {
			t.Fatal("denied")
		}
	}); n > 0 {
		t.Errorf("AdmitMany of 4 items allocates %.1f times per call, want 0", n)
	}
}

func TestAdmitManyRefusesBadCalls(t *testing.T) {
	l, rs, _ := newMany(t, manyPolicy)
	ctx := context.Background()
	if _, err := l.AdmitMany(ctx, []tiers.Item{{Request: manyUser("a")}, {Request: manyUser("b")}}, make([]floodgate.Decision, 1)); err == nil {
		t.Error("out shorter than items: no error")
	}
	if _, err := l.AdmitMany(ctx, make([]tiers.Item, tiers.MaxItems+1), make([]floodgate.Decision, tiers.MaxItems+1)); err == nil {
		t.Error("too many items: no error")
	}
	if d, err := l.AdmitMany(ctx, []tiers.Item{{Request: manyUser("a")}, {}}, make([]floodgate.Decision, 2)); err == nil || d.Allowed {
		t.Errorf("nil request: %+v, %v", d, err)
	}
	if len(rs.costs()) != 0 {
		t.Fatalf("refused calls took %v", rs.costs())
	}
	if d, err := l.AdmitMany(ctx, nil, nil); err != nil || !d.Allowed {
		t.Fatalf("no items: %+v, %v; want allowed", d, err)
	}
	out := make([]tiers.DescriptorDecision, 2)
	ds := []tiers.Descriptor{{Entries: []tiers.DescriptorEntry{{Key: "k", Value: "v"}}}, {Cost: -1}}
	if _, err := l.AdmitDescriptors(ctx, "d", ds, out); !errors.Is(err, tiers.ErrInvalidCost) {
		t.Fatalf("negative descriptor cost: %v", err)
	}
	if _, err := l.AdmitDescriptors(ctx, "d", make([]tiers.Descriptor, tiers.MaxDescriptors+1), make([]tiers.DescriptorDecision, tiers.MaxDescriptors+1)); err == nil {
		t.Fatal("too many descriptors: no error")
	}
}

// Two requests decided together: the second is over its limit, so the
// first is not charged either.
func ExampleLimiter_AdmitMany() {
	store, err := memstore.New(memstore.WithClock(clock.New(time.Time{})))
	if err != nil {
		fmt.Println(err)
		return
	}
	policy, err := tiers.Load([]byte(`
rules:
  - {name: per-user, key: [user], rate: 10/1m, algorithm: fixed_window}
  - {name: per-ip, key: [ip], rate: 1/1m, algorithm: fixed_window}
`))
	if err != nil {
		fmt.Println(err)
		return
	}
	l, err := tiers.NewLimiter(store, policy)
	if err != nil {
		fmt.Println(err)
		return
	}
	alice := &floodgate.Request{Identity: floodgate.Identity{User: "alice"}}
	client := &floodgate.Request{Identity: floodgate.Identity{IP: netip.MustParseAddr("192.0.2.1")}}
	items := []tiers.Item{{Request: alice, Rule: "per-user"}, {Request: client, Rule: "per-ip"}}
	out := make([]floodgate.Decision, len(items))
	for range 2 {
		d, err := l.AdmitMany(context.Background(), items, out)
		if err != nil {
			fmt.Println(err)
			return
		}
		fmt.Printf("allowed=%v binding=%s | alice: allowed=%v remaining=%d | ip: allowed=%v remaining=%d\n",
			d.Allowed, d.Policy, out[0].Allowed, out[0].Remaining, out[1].Allowed, out[1].Remaining)
	}
	// Output:
	// allowed=true binding=per-ip | alice: allowed=true remaining=9 | ip: allowed=true remaining=0
	// allowed=false binding=per-ip | alice: allowed=true remaining=9 | ip: allowed=false remaining=0
}
