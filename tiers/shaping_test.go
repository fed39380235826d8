package tiers_test

import (
	"context"
	"errors"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/quota"
	"github.com/floodgate-go/floodgate/testing/clock"
	"github.com/floodgate-go/floodgate/tiers"
	"github.com/floodgate-go/floodgate/tiers/memstore"
)

// settlePolicy: tenant tokens are settled (estimate 100 per request, 1000
// per hour, burst 1000: no refill worth counting on a frozen clock); the
// per-IP request count is not.
const settlePolicy = `
rules:
  - name: tokens
    key: [tenant]
    rate: 1000/1h
    cost: 100
    settle: true
  - name: requests
    key: [ip]
    rate: 50/1h
`

func tenantReq(tenant string) *floodgate.Request {
	return &floodgate.Request{Method: "/llm.v1.LLM/Complete", Identity: floodgate.Identity{Tenant: tenant, IP: netip.MustParseAddr("192.0.2.7")}}
}

// peek returns what is left in the bucket of rule for r (a cost-0 take,
// which charges nothing).
func peek(t *testing.T, s quota.Store, l *tiers.Limiter, r *floodgate.Request, rule string) int64 {
	t.Helper()
	for _, b := range l.Buckets(nil, r) {
		if b.Rule != rule {
			continue
		}
		b.Cost = 0
		var res [1]quota.Result
		if _, err := s.Take(context.Background(), []quota.Bucket{b}, res[:]); err != nil {
			t.Fatal(err)
		}
		return res[0].Remaining
	}
	t.Fatalf("no bucket of rule %q", rule)
	return 0
}

func admitDone(t *testing.T, l *tiers.Limiter, r *floodgate.Request) (floodgate.Decision, floodgate.Done) {
	t.Helper()
	d, done, err := l.Admit(context.Background(), r)
	if err != nil {
		t.Fatalf("Admit: %v", err)
	}
	return d, done
}

// A request is charged its estimate and settled with its actual cost:
// more is charged, less refunded, Ignored refunds all, no reported cost
// keeps the estimate; the rule that does not settle keeps its charge of 1
// every time.
func TestSettleChargesTheDifference(t *testing.T) {
	clk := clock.New(time.Time{})
	s := newMemstore(t, memstore.WithClock(clk))
	l := mustLimiter(t, s, settlePolicy)
	r := tenantReq("acme")
	steps := []struct {
		name   string
		res    floodgate.Result
		tokens int64 // left in the tenant's bucket after settling
	}{
		{"more", floodgate.Result{Cost: 250, HasCost: true}, 750},
		{"less", floodgate.Result{Cost: 40, HasCost: true}, 710},
		{"ignored", floodgate.Ignored, 710},
		{"unreported", floodgate.Result{Outcome: floodgate.OutcomeFailed}, 610},
		{"exact", floodgate.Result{Cost: 100, HasCost: true}, 510},
		{"zero", floodgate.Result{HasCost: true}, 510},
	}
	for i, st := range steps {
		d, done := admitDone(t, l, r)
		if !d.Allowed || done == nil {
			t.Fatalf("%s: allowed=%v done=%v, want an allowed request with a Done", st.name, d.Allowed, done != nil)
		}
		// The estimate is charged at admission.
		if got, want := peek(t, s, l, r, "tokens"), tokensBefore(steps, i)-100; got != want {
			t.Fatalf("%s: %d tokens left after admission, want %d", st.name, got, want)
		}
		done(st.res)
		done(floodgate.Result{Cost: 999, HasCost: true}) // a second call settles nothing
		if got := peek(t, s, l, r, "tokens"); got != st.tokens {
			t.Fatalf("%s: %d tokens left after settling, want %d", st.name, got, st.tokens)
		}
		if got, want := peek(t, s, l, r, "requests"), int64(50-(i+1)); got != want {
			t.Fatalf("%s: %d requests left, want %d (the rule that does not settle keeps its charge)", st.name, got, want)
		}
	}
	if st := l.SettleStats(); st.Settled != 4 || st.Failed != 0 {
		t.Fatalf("SettleStats = %+v, want 4 settled (more, less, ignored, zero), none failed", st)
	}
}

func tokensBefore(steps []struct {
	name   string
	res    floodgate.Result
	tokens int64
}, i int) int64 {
	if i == 0 {
		return 1000
	}
	return steps[i-1].tokens
}

// A request that cost more than the bucket holds puts it in debt: the
// next requests are denied until the refill pays it, exactly.
func TestSettleDebtIsWaitedOut(t *testing.T) {
	clk := clock.New(time.Time{})
	s := newMemstore(t, memstore.WithClock(clk))
	l := mustLimiter(t, s, `
rules:
  - {name: tokens, key: [tenant], rate: 100/1s, burst: 100, cost: 10, settle: true}
`)
	r := tenantReq("acme")
	_, done := admitDone(t, l, r)
	done(floodgate.Result{Cost: 350, HasCost: true}) // 100 - 350 = -250 tokens
	d, _ := admitDone(t, l, r)
	// 10 more need 260 tokens: 2.6 s at 100/s.
	if d.Allowed || d.RetryAfter != 2600*time.Millisecond || d.Remaining != 0 {
		t.Fatalf("in debt: %+v, want a deny with RetryAfter 2.6s and 0 remaining", d)
	}
	clk.Advance(2599 * time.Millisecond)
	if d, _ := admitDone(t, l, r); d.Allowed {
		t.Fatalf("1 ms before the debt is paid: allowed")
	}
	clk.Advance(time.Millisecond)
	if d, done := admitDone(t, l, r); !d.Allowed || done == nil {
		t.Fatalf("once the debt is paid: %+v", d)
	}
}

// Every level the request was charged on is settled by exactly its own
// difference, whatever its algorithm: a token bucket (estimate from the
// method's cost) and a fixed window (estimate from the rule's cost).
func TestSettleEveryLevel(t *testing.T) {
	clk := clock.New(time.Time{})
	s := newMemstore(t, memstore.WithClock(clk))
	l := mustLimiter(t, s, `
rules:
  - {name: user-tokens, key: [user], rate: 1000/1h, settle: true}
  - {name: tenant-tokens, key: [tenant], rate: 5000/1h, algorithm: fixed_window, cost: 300, settle: true}
  - {name: ip, key: [ip], rate: 100/1h, cost: 1}
`)
	r := tenantReq("acme")
	r.Identity.User = "alice"
	r.Cost = 200 // the method's estimate
	d, done := admitDone(t, l, r)
	if !d.Allowed || done == nil {
		t.Fatalf("%+v", d)
	}
	if u, tn := peek(t, s, l, r, "user-tokens"), peek(t, s, l, r, "tenant-tokens"); u != 800 || tn != 4700 {
		t.Fatalf("after admission: user %d tenant %d, want 800 and 4700", u, tn)
	}
	done(floodgate.Result{Cost: 500, HasCost: true}) // user +300, tenant +200
	if u, tn, ip := peek(t, s, l, r, "user-tokens"), peek(t, s, l, r, "tenant-tokens"), peek(t, s, l, r, "ip"); u != 500 || tn != 4500 || ip != 99 {
		t.Fatalf("after settling 500: user %d tenant %d ip %d, want 500, 4500, 99", u, tn, ip)
	}
}

// A request no settling rule matches gets no Done: the no-settlement path
// is the plain one.
func TestNoDoneWithoutSettlingRule(t *testing.T) {
	l := mustLimiter(t, newMemstore(t), `
rules:
  - {name: tokens, match: {method: /llm.v1.LLM/Complete}, key: [tenant], rate: 1000/1h, settle: true}
  - {name: ip, key: [ip], rate: 100/1h}
`)
	r := tenantReq("acme")
	r.Method = "/llm.v1.LLM/List"
	if d, done := admitDone(t, l, r); !d.Allowed || done != nil {
		t.Fatalf("allowed=%v done=%v, want allowed without Done", d.Allowed, done != nil)
	}
}

// takeOnlyStore hides memstore's Settle.
type takeOnlyStore struct{ s quota.Store }

func (o takeOnlyStore) Take(ctx context.Context, b []quota.Bucket, r []quota.Result) (bool, error) {
	return o.s.Take(ctx, b, r)
}

// A policy that settles or waits over a store that cannot settle is
// refused, naming each rule, and the policy in force stays.
func TestShapingNeedsASettler(t *testing.T) {
	st := takeOnlyStore{newMemstore(t)}
	p := mustLoad(t, `
rules:
  - {name: a, key: [tenant], rate: 10/1s, settle: true}
  - {name: b, key: [user], rate: 10/1s, max_wait: 100ms}
  - {name: c, key: [ip], rate: 10/1s}
`)
	if _, err := tiers.NewLimiter(st, p); err == nil || err.Error() != "rules[0].settle: the store cannot settle (it is not a quota.Settler, or what it wraps is not); every store of this module is\n"+
		"rules[1].max_wait: the store cannot give back a cancelled wait's units (it is not a quota.Settler, or what it wraps is not); every store of this module is" {
		t.Fatalf("NewLimiter: %v", err)
	}
	l := mustLimiter(t, st, "rules:\n  - {name: c, key: [ip], rate: 10/1s}\n")
	if err := l.SetPolicy(p); err == nil {
		t.Fatal("SetPolicy accepted settle over a store that cannot settle")
	}
	if got := l.Policy().Rules[0].Name; got != "c" {
		t.Fatalf("policy in force is %q, want the old one", got)
	}
}

func TestShapingLoadErrors(t *testing.T) {
	cases := []struct{ yaml, want string }{
		{`
rules:
  - name: w
    rate: 5/1m
    algorithm: fixed_window
    max_wait: 1s
`, `rules[0].max_wait: needs token_bucket or gcra (they book units ahead; a window's count cannot), not fixed_window, at line 6`},
		{`
rules:
  - {name: w, rate: 5/1m, max_waiters: 3}
`, `rules[0].max_waiters: is only for rules with max_wait, at line 3`},
		{`
rules:
  - {name: w, rate: 5/1m, max_wait: 2m}
`, `rules[0].max_wait: 2m0s is above 1m0s: a request held that long is better told to come back, at line 3`},
		{`
rules:
  - {name: w, rate: 5/1m, max_wait: soon}
`, `rules[0].max_wait: "soon" is not a positive duration such as 250ms, at line 3`},
		{`
rules:
  - {name: w, rate: 5/1m, max_wait: 1s, consistency: leased}
`, `rules[0].max_wait: is not for consistency leased: a lease spends units as soon as it holds them, and units booked ahead are not there yet (use exact or async), at line 3`},
		{`
rules:
  - {name: w, rate: 5/1m, max_wait: 1s, max_waiters: 0}
`, `rules[0].max_waiters: 0 must be at least 1, at line 3`},
		{`
rules:
  - {name: w, rate: 5/1m, settle: yes please}
`, `rules[0].settle: must be true or false, got "yes please", at line 3`},
		{`
tiers:
  free: {rate: 5/1m, algorithm: sliding_window_log}
default_tier: free
rules:
  - {name: w, key: [tenant], rate: tier, max_wait: 1s}
`, `rules[0].max_wait: needs token_bucket or gcra (they book units ahead), but tier "free" uses sliding_window_log, at line 6`},
		{`
rules:
  - {name: w, key: [user], rate: 5/1m, max_wait: 1s}
overrides:
  - {rule: w, key: {user: bob}, rate: 9/1m, algorithm: fixed_window}
`, `overrides[0].algorithm: rule "w" has max_wait, which needs token_bucket or gcra (they book units ahead), not fixed_window, at line 5`},
	}
	for _, c := range cases {
		_, err := tiers.Load([]byte(c.yaml))
		if err == nil || err.Error() != c.want {
			t.Errorf("Load(%s)\n got  %v\n want %s", strings.TrimSpace(c.yaml), err, c.want)
		}
	}
}

// waitPolicy: 10/s, burst 1: one request at once, then one per 100 ms;
// waits of up to 1 s, at most 3 waiting per key.
const waitPolicy = `
rules:
  - {name: shaped, key: [tenant], rate: 10/1s, burst: 1, max_wait: 1s, max_waiters: 3}
`

type admitted struct {
	d   floodgate.Decision
	err error
}

// goAdmit admits r on its own goroutine and returns where its answer
// arrives.
func goAdmit(ctx context.Context, l floodgate.Admitter, r *floodgate.Request) <-chan admitted {
	ch := make(chan admitted, 1)
	go func() {
		d, _, err := l.Admit(ctx, r)
		ch <- admitted{d, err}
	}()
	return ch
}

// waitTimers waits (bounded) until the fake clock has n pending timers:
// that many requests are waiting.
func waitTimers(t *testing.T, clk *clock.Fake, n int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for clk.Timers() != n {
		if time.Now().After(deadline) {
			t.Fatalf("%d requests waiting, want %d", clk.Timers(), n)
		}
		time.Sleep(time.Millisecond)
	}
}

func shapedLimiter(t *testing.T, clk *clock.Fake, policy string) (*tiers.Limiter, *memstore.Store) {
	t.Helper()
	s := newMemstore(t, memstore.WithClock(clk))
	return mustLimiter(t, s, policy, tiers.WithClock(clk)), s
}

// Waiters are served in the order they arrived, each after exactly the
// wait its units booked, and the Decision (so the Observer) says so.
func TestWaitersInOrder(t *testing.T) {
	clk := clock.New(time.Time{})
	l, _ := shapedLimiter(t, clk, waitPolicy)
	var mu sync.Mutex
	var seen []time.Duration
	obs := floodgate.AdmitFunc(func(ctx context.Context, r *floodgate.Request) (floodgate.Decision, floodgate.Done, error) {
		d, done, err := l.Admit(ctx, r)
		mu.Lock()
		seen = append(seen, d.Waited)
		mu.Unlock()
		return d, done, err
	})
	r := tenantReq("acme")
	if d, _, err := obs.Admit(context.Background(), r); err != nil || !d.Allowed || d.Waited != 0 {
		t.Fatalf("first: %+v %v, want allowed at once", d, err)
	}
	var chs []<-chan admitted
	for i := 1; i <= 3; i++ {
		chs = append(chs, goAdmit(context.Background(), obs, r))
		waitTimers(t, clk, i) // each books behind the one before
	}
	for i, ch := range chs {
		clk.Advance(100 * time.Millisecond)
		a := <-ch
		if want := time.Duration(i+1) * 100 * time.Millisecond; a.err != nil || !a.d.Allowed || a.d.Waited != want {
			t.Fatalf("waiter %d: %+v %v, want allowed after %v", i, a.d, a.err, want)
		}
		for j := i + 1; j < len(chs); j++ {
			select {
			case a := <-chs[j]:
				t.Fatalf("waiter %d proceeded before waiter %d: %+v", j, i+1, a.d)
			default:
			}
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if want := []time.Duration{0, 100 * time.Millisecond, 200 * time.Millisecond, 300 * time.Millisecond}; !equalDurations(seen, want) {
		t.Fatalf("observer saw waits %v, want %v", seen, want)
	}
	if st := l.SettleStats(); st.Waited != 3 || st.GivenBack != 0 {
		t.Fatalf("SettleStats = %+v, want 3 waited", st)
	}
}

func equalDurations(a, b []time.Duration) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// A waiter whose context ends gives its booked unit back: the one behind
// it keeps its place (as x/time/rate's Cancel), and the next arrival
// books the freed unit.
func TestCancelledWaitGivesBack(t *testing.T) {
	clk := clock.New(time.Time{})
	l, _ := shapedLimiter(t, clk, waitPolicy)
	r := tenantReq("acme")
	admitDone(t, l, r) // the burst: tokens 0
	ctx, cancel := context.WithCancel(context.Background())
	first := goAdmit(ctx, l, r) // waits 100 ms: tokens -1
	waitTimers(t, clk, 1)
	second := goAdmit(context.Background(), l, r) // waits 200 ms: tokens -2
	waitTimers(t, clk, 2)
	clk.Advance(50 * time.Millisecond)
	cancel()
	a := <-first
	if a.d.Allowed || !errors.Is(a.err, context.Canceled) || a.d.Waited != 50*time.Millisecond || a.d.RetryAfter != 50*time.Millisecond {
		t.Fatalf("cancelled waiter: %+v %v, want a deny after 50ms with RetryAfter 50ms and context.Canceled", a.d, a.err)
	}
	if st := l.SettleStats(); st.GivenBack != 1 || st.Settled != 1 {
		t.Fatalf("SettleStats = %+v, want 1 given back", st)
	}
	// At 50 ms: -2 + 0.5 + 1 (given back) = -0.5: a new request waits
	// ceil((1 + 0.5) / 10 s) = 150 ms, not the 250 ms it would without
	// the refund.
	third := goAdmit(context.Background(), l, r)
	waitTimers(t, clk, 3)               // the cancelled waiter's fake timer is still pending
	clk.Advance(150 * time.Millisecond) // now 200 ms: both due
	if a := <-second; !a.d.Allowed || a.d.Waited != 200*time.Millisecond {
		t.Fatalf("second: %+v %v", a.d, a.err)
	}
	if a := <-third; !a.d.Allowed || a.d.Waited != 150*time.Millisecond {
		t.Fatalf("third: %+v %v, want allowed after 150ms", a.d, a.err)
	}
}

// A context whose deadline comes before the units is denied at once, with
// the Retry-After of a plain deny, and books nothing.
func TestDeadlineShorterThanWait(t *testing.T) {
	clk := clock.New(time.Time{})
	l, _ := shapedLimiter(t, clk, waitPolicy)
	r := tenantReq("acme")
	admitDone(t, l, r) // tokens 0: the next unit is 100 ms away
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	d, done, err := l.Admit(ctx, r)
	if err != nil || d.Allowed || done != nil || d.RetryAfter != 100*time.Millisecond || d.Waited != 0 {
		t.Fatalf("deadline 50ms, wait 100ms: %+v %v, want an immediate deny with RetryAfter 100ms", d, err)
	}
	if n := clk.Timers(); n != 0 {
		t.Fatalf("%d waits started, want none", n)
	}
	// Nothing was booked: without a deadline the next request waits
	// exactly 100 ms.
	ch := goAdmit(context.Background(), l, r)
	waitTimers(t, clk, 1)
	clk.Advance(100 * time.Millisecond)
	if a := <-ch; !a.d.Allowed || a.d.Waited != 100*time.Millisecond {
		t.Fatalf("after the deny: %+v %v, want allowed after 100ms", a.d, a.err)
	}
}

// At most max_waiters requests of one key wait; the next is decided as
// without max_wait (a deny with its Retry-After), and waits again once a
// place is free.
func TestWaiterCap(t *testing.T) {
	clk := clock.New(time.Time{})
	l, _ := shapedLimiter(t, clk, waitPolicy)
	r := tenantReq("acme")
	key := l.Buckets(nil, r)[0].Key
	admitDone(t, l, r) // tokens 0
	var chs []<-chan admitted
	for i := 1; i <= 3; i++ {
		chs = append(chs, goAdmit(context.Background(), l, r))
		waitTimers(t, clk, i)
	}
	if n := l.Waiting(key); n != 3 {
		t.Fatalf("Waiting = %d, want 3", n)
	}
	// Tokens -3: a fourth would wait 400 ms, but the cap is reached.
	d, _, err := l.Admit(context.Background(), r)
	if err != nil || d.Allowed || d.RetryAfter != 400*time.Millisecond || clk.Timers() != 3 {
		t.Fatalf("over the cap: %+v %v (%d waiting), want a deny with RetryAfter 400ms", d, err, clk.Timers())
	}
	clk.Advance(100 * time.Millisecond)
	if a := <-chs[0]; !a.d.Allowed {
		t.Fatalf("first waiter: %+v", a.d)
	}
	waitTimers(t, clk, 2)
	// A place is free: -3 + 1 = -2, the next waits 300 ms.
	chs = append(chs, goAdmit(context.Background(), l, r))
	waitTimers(t, clk, 3)
	clk.Advance(300 * time.Millisecond)
	for i, ch := range chs[1:] {
		if a := <-ch; !a.d.Allowed || a.d.Waited == 0 {
			t.Fatalf("waiter %d: %+v %v", i+2, a.d, a.err)
		}
	}
	if n := l.Waiting(key); n != 0 {
		t.Fatalf("Waiting = %d after all proceeded, want 0", n)
	}
}

// Concurrent arrivals never put more than max_waiters to wait, and every
// unit booked by one that could not wait is given back: the bucket then
// holds exactly one booked unit per waiter.
func TestWaiterCapConcurrent(t *testing.T) {
	clk := clock.New(time.Time{})
	l, s := shapedLimiter(t, clk, waitPolicy)
	r := tenantReq("acme")
	key := l.Buckets(nil, r)[0].Key
	admitDone(t, l, r) // tokens 0
	const n = 8
	var chs []<-chan admitted
	for range n {
		chs = append(chs, goAdmit(context.Background(), l, r))
	}
	denied := 0
	done := make([]bool, n)
	deadline := time.Now().Add(10 * time.Second)
	for denied+clk.Timers() != n {
		if time.Now().After(deadline) {
			t.Fatalf("%d denied, %d waiting, of %d", denied, clk.Timers(), n)
		}
		for i, ch := range chs {
			if done[i] {
				continue
			}
			select {
			case a := <-ch:
				if a.d.Allowed || a.err != nil {
					t.Fatalf("arrival %d decided without waiting: %+v %v", i, a.d, a.err)
				}
				done[i] = true
				denied++
			default:
			}
		}
		time.Sleep(time.Millisecond)
	}
	waiting := clk.Timers()
	if waiting > 3 || waiting < 1 || l.Waiting(key) != waiting {
		t.Fatalf("%d waiting (Waiting says %d), want 1 to 3", waiting, l.Waiting(key))
	}
	// One booked unit per waiter: tokens = -waiting, so the bucket is full
	// again (burst 1) after (1 + waiting) x 100 ms.
	b := l.Buckets(nil, r)[0]
	b.Cost = 0
	var res [1]quota.Result
	if _, err := s.Take(context.Background(), []quota.Bucket{b}, res[:]); err != nil {
		t.Fatal(err)
	}
	if want := time.Duration(1+waiting) * 100 * time.Millisecond; res[0].Reset != want {
		t.Fatalf("bucket full in %v, want %v (one booked unit per waiter)", res[0].Reset, want)
	}
	clk.Advance(time.Second)
	for i, ch := range chs {
		if !done[i] {
			if a := <-ch; !a.d.Allowed {
				t.Fatalf("waiter %d: %+v %v", i, a.d, a.err)
			}
		}
	}
}
