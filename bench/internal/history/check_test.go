package history

import (
	"strings"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate/quota"
)

// t0 is an arbitrary origin (Unix ns) on a whole second.
const t0 = int64(1_790_000_000) * int64(time.Second)

func tb(rate int64, per time.Duration, burst int64) quota.Limit {
	return quota.Limit{Algorithm: quota.TokenBucket, Rate: rate, Period: per, Burst: burst}
}

func fw(rate int64, per time.Duration) quota.Limit {
	return quota.Limit{Algorithm: quota.FixedWindow, Rate: rate, Period: per}
}

// at is a take answered at once, run at Redis time ms (milliseconds after
// t0), on one bucket.
func at(ms int64, key string, l quota.Limit, out Outcome, rem int64) Op {
	ns := t0 + ms*int64(time.Millisecond)
	return Op{Sent: ns - 100_000, Answered: ns + 100_000, Now: ns / 1000, Outcome: out,
		Buckets: []Bucket{{Key: key, Limit: l, Cost: 1, Allowed: out == Allowed, Remaining: rem}}}
}

// span is a take without Redis time, sent at from and answered at to (ms).
func span(from, to int64, key string, l quota.Limit, out Outcome, rem int64) Op {
	o := at(0, key, l, out, rem)
	o.Sent, o.Answered, o.Now = t0+from*int64(time.Millisecond), t0+to*int64(time.Millisecond), 0
	return o
}

func check(t *testing.T, h History) Result {
	t.Helper()
	r, err := Check(h, Options{Timeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Log(r)
	if r.Counterexample != "" {
		t.Log(r.Counterexample)
	}
	return r
}

func want(t *testing.T, h History, v Verdict) Result {
	t.Helper()
	r := check(t, h)
	if r.Verdict != v {
		t.Fatalf("verdict %s, want %s; %s", r.Verdict, v, r.Counterexample)
	}
	return r
}

func TestTokenBucketSequential(t *testing.T) {
	l := tb(1, time.Hour, 2) // no refill to speak of
	ok := History{Ops: []Op{
		at(0, "k", l, Allowed, 1),
		at(10, "k", l, Allowed, 0),
		at(20, "k", l, Denied, 0),
	}}
	want(t, ok, Linearizable)

	// Two allowed takes past the limit.
	over := History{Ops: []Op{
		at(0, "k", l, Allowed, 1),
		at(10, "k", l, Allowed, 0),
		at(20, "k", l, Allowed, 0),
	}}
	r := want(t, over, NotLinearizable)
	if !strings.Contains(r.Counterexample, "take 2") {
		t.Errorf("counterexample does not name take 2: %s", r.Counterexample)
	}

	// A deny explained by nothing: a fresh bucket.
	want(t, History{Ops: []Op{at(0, "k", l, Denied, 0)}}, NotLinearizable)

	// A remaining count the model does not reach: a fresh bucket of 3
	// holds 2 after one take. (At a whole number of tokens, within the
	// tolerance, either floor is accepted: 1 here would pass.)
	want(t, History{Ops: []Op{at(0, "k", tb(1, time.Hour, 3), Allowed, 0)}}, NotLinearizable)
}

func TestTokenBucketRefill(t *testing.T) {
	l := tb(10, time.Second, 1) // one token every 100 ms
	want(t, History{Ops: []Op{
		at(0, "k", l, Allowed, 0),
		at(50, "k", l, Denied, 0),
		at(100, "k", l, Allowed, 0),
	}}, Linearizable)
	want(t, History{Ops: []Op{
		at(0, "k", l, Allowed, 0),
		at(60, "k", l, Allowed, 0),
	}}, NotLinearizable)
	// Without Redis time, a take spanning the refill may have run after it.
	want(t, History{Ops: []Op{
		at(0, "k", l, Allowed, 0),
		span(60, 120, "k", l, Allowed, 0),
	}}, Linearizable)
	want(t, History{Ops: []Op{
		at(0, "k", l, Allowed, 0),
		span(10, 90, "k", l, Allowed, 0),
	}}, NotLinearizable)
}

// TestConcurrentOrder needs the search: the deny is listed (and sent)
// first, but only the order allow-then-deny explains both.
func TestConcurrentOrder(t *testing.T) {
	l := tb(1, time.Hour, 1)
	want(t, History{Ops: []Op{
		span(0, 30, "k", l, Denied, 0),
		span(10, 20, "k", l, Allowed, 0),
	}}, Linearizable)
	// Two concurrent allows past a burst of 1: no order explains them.
	want(t, History{Ops: []Op{
		span(0, 30, "k", l, Allowed, 0),
		span(10, 20, "k", l, Allowed, 0),
	}}, NotLinearizable)
	// The deny answered before the allow was sent comes first: it is
	// explained by nothing.
	want(t, History{Ops: []Op{
		span(0, 5, "k", l, Denied, 0),
		span(10, 20, "k", l, Allowed, 0),
	}}, NotLinearizable)
}

// TestAllOrNothing: a take denied by its first level must not charge its
// second.
func TestAllOrNothing(t *testing.T) {
	tight, loose := tb(1, time.Hour, 1), tb(1, time.Hour, 3)
	two := func(ms int64, out Outcome, a1 bool, r1 int64, a2 bool, r2 int64) Op {
		o := at(ms, "tenant", tight, out, r1)
		o.Buckets[0].Allowed = a1
		o.Buckets = append(o.Buckets, Bucket{Key: "user", Limit: loose, Cost: 1, Allowed: a2, Remaining: r2})
		return o
	}
	ok := History{Ops: []Op{
		two(0, Allowed, true, 0, true, 2),
		two(10, Denied, false, 0, true, 2), // nothing charged: user still 2
		at(20, "user", loose, Allowed, 1),
	}}
	want(t, ok, Linearizable)
	charged := History{Ops: []Op{
		two(0, Allowed, true, 0, true, 2),
		two(10, Denied, false, 0, true, 2),
		at(20, "user", loose, Allowed, 0), // as if the denied take charged the user
	}}
	want(t, charged, NotLinearizable)
	// A denied take must have a bucket that denied.
	want(t, History{Ops: []Op{two(0, Denied, true, 1, true, 2)}}, NotLinearizable)
}

func TestUnknownOutcome(t *testing.T) {
	l := tb(1, time.Hour, 1)
	u := span(0, 10, "k", l, Unknown, 0)
	u.Err = "i/o timeout"
	// The failed take may have applied: it explains the deny.
	want(t, History{Ops: []Op{u, at(20, "k", l, Denied, 0)}}, Linearizable)
	// Or not: the allow is fine too.
	want(t, History{Ops: []Op{u, at(20, "k", l, Allowed, 0)}}, Linearizable)
	// It explains no second allow.
	want(t, History{Ops: []Op{u, at(20, "k", l, Allowed, 0), at(30, "k", l, Allowed, 0)}}, NotLinearizable)
	// Nor a deny before it was sent.
	u2 := u
	u2.Sent, u2.Answered = t0+40*int64(time.Millisecond), t0+50*int64(time.Millisecond)
	want(t, History{Ops: []Op{u2, at(20, "k", l, Denied, 0)}}, NotLinearizable)
}

func TestReset(t *testing.T) {
	l := tb(1, time.Hour, 1)
	ops := []Op{at(0, "k", l, Allowed, 0), at(100, "k", l, Allowed, 0)}
	want(t, History{Ops: ops}, NotLinearizable)
	rs := []Reset{{From: t0 + 20*int64(time.Millisecond), To: t0 + 80*int64(time.Millisecond)}}
	want(t, History{Ops: ops, Resets: rs}, Linearizable)
	// A restart does not explain a second allow before it.
	late := []Reset{{From: t0 + 200*int64(time.Millisecond), To: t0 + 300*int64(time.Millisecond)}}
	want(t, History{Ops: ops, Resets: late}, NotLinearizable)
}

func TestFixedWindow(t *testing.T) {
	l := fw(2, time.Second)
	want(t, History{Ops: []Op{
		at(100, "w", l, Allowed, 1),
		at(200, "w", l, Allowed, 0),
		at(300, "w", l, Denied, 0),
		at(1100, "w", l, Allowed, 1), // a new window
	}}, Linearizable)
	want(t, History{Ops: []Op{
		at(100, "w", l, Allowed, 1),
		at(200, "w", l, Allowed, 0),
		at(300, "w", l, Allowed, 0),
	}}, NotLinearizable)
	// A take without Redis time that spans the boundary may have run in
	// the next window.
	want(t, History{Ops: []Op{
		at(100, "w", l, Allowed, 1),
		at(200, "w", l, Allowed, 0),
		span(900, 1050, "w", l, Allowed, 1),
	}}, Linearizable)
	want(t, History{Ops: []Op{
		at(100, "w", l, Allowed, 1),
		at(200, "w", l, Allowed, 0),
		span(900, 990, "w", l, Allowed, 1),
	}}, NotLinearizable)
}

func TestTimeOutsideInterval(t *testing.T) {
	o := at(0, "k", tb(1, time.Hour, 1), Allowed, 0)
	o.Now += 5000 // 5 ms after it was answered
	r := want(t, History{Ops: []Op{o}}, NotLinearizable)
	if !strings.Contains(r.Counterexample, "outside its interval") {
		t.Errorf("counterexample: %s", r.Counterexample)
	}
}

func TestRefusesOtherAlgorithms(t *testing.T) {
	o := at(0, "k", quota.Limit{Algorithm: quota.GCRA, Rate: 1, Period: time.Second, Burst: 1}, Allowed, 0)
	if _, err := Check(History{Ops: []Op{o}}, Options{}); err == nil {
		t.Fatal("no error for GCRA")
	}
}

// TestBudget: the search stops at its bound.
func TestBudget(t *testing.T) {
	l := tb(1, time.Hour, 100)
	var ops []Op
	for i := range 50 {
		ops = append(ops, span(0, 1000, "k", l, Allowed, int64(99-i)))
	}
	r, err := Check(History{Ops: ops}, Options{MaxSteps: 10})
	if err != nil || r.Verdict != Inconclusive {
		t.Fatalf("%v, %v: want inconclusive", r, err)
	}
}

// TestFailover: a failover (a Reset with Keys) lets the named buckets
// lose charges, any number up to full, and nothing else: the same
// history fails without it, fails when the lost charges are on a bucket
// it does not name, and a bucket cannot gain charges through it.
func TestFailover(t *testing.T) {
	l := tb(1, time.Hour, 3)
	ms := func(n int64) int64 { return t0 + n*int64(time.Millisecond) }
	// Two charges on k, then (after the failover) k holds 2 again: one
	// charge was not replicated.
	ops := []Op{
		at(0, "k", l, Allowed, 2),
		at(10, "k", l, Allowed, 1),
		at(100, "k", l, Allowed, 1),
	}
	fo := Reset{From: ms(20), To: ms(80), Keys: []string{"k"}}
	want(t, History{Ops: ops}, NotLinearizable)
	r := want(t, History{Ops: ops, Resets: []Reset{fo}}, Linearizable)
	if r.Resets != 1 {
		t.Errorf("%d resets counted, want 1", r.Resets)
	}
	other := fo
	other.Keys = []string{"j"}
	want(t, History{Ops: ops, Resets: []Reset{other}}, NotLinearizable)
	// Every charge lost: full again.
	want(t, History{Ops: append(ops[:2:2], at(100, "k", l, Allowed, 2)), Resets: []Reset{fo}}, Linearizable)
	// A failover never adds charges: k cannot hold fewer than 1.
	want(t, History{Ops: append(ops[:2:2], at(100, "k", l, Denied, 0)), Resets: []Reset{fo}}, NotLinearizable)
	// A bucket the failover does not name keeps its state.
	two := []Op{at(0, "j", l, Allowed, 2), at(10, "j", l, Allowed, 1), at(100, "j", l, Allowed, 1)}
	want(t, History{Ops: two, Resets: []Reset{fo}}, NotLinearizable)
}

// rep is a report call's charge of cost units to key, sent at from and
// answered at to (ms), leaving rem.
func rep(from, to int64, key string, l quota.Limit, cost, rem int64) Op {
	return Op{Sent: t0 + from*int64(time.Millisecond), Answered: t0 + to*int64(time.Millisecond), Outcome: Allowed, Report: true,
		Buckets: []Bucket{{Key: key, Limit: l, Cost: cost, Allowed: true, Remaining: rem}}}
}

// TestReports: the charges of report calls (package fallback's local
// admits) are part of the model: a take that only a report explains
// passes with it and fails without it; a report cannot charge units the
// bucket does not hold, a give-back fills up to the capacity only, a
// resolved charge (no remaining count) counts, and one of unknown outcome
// may or may not have been applied.
func TestReports(t *testing.T) {
	l := tb(1, time.Hour, 3) // no refill to speak of
	takes := []Op{at(0, "k", l, Allowed, 2), at(100, "k", l, Allowed, 0)}
	want(t, History{Ops: takes}, NotLinearizable) // 2 then 0: a unit missing
	want(t, History{Ops: append(takes[:1:1], rep(10, 50, "k", l, 1, 1), takes[1])}, Linearizable)
	// A report that charged 2 of a bucket holding 2 leaves 0, not 1.
	want(t, History{Ops: append(takes[:1:1], rep(10, 50, "k", l, 2, 1), takes[1])}, NotLinearizable)
	// A report cannot charge 3 of a bucket holding 2.
	want(t, History{Ops: append(takes[:1:1], rep(10, 50, "k", l, 3, 0))}, NotLinearizable)
	// A give-back of 5 fills to the capacity, 3: a take then leaves 2.
	want(t, History{Ops: append(takes[:1:1], rep(10, 50, "k", l, -5, 3), at(100, "k", l, Allowed, 2))}, Linearizable)
	want(t, History{Ops: append(takes[:1:1], rep(10, 50, "k", l, -5, 3), at(100, "k", l, Allowed, 3))}, NotLinearizable)
	// Resolved: the charge is known, its remaining count is not.
	res := rep(10, 50, "k", l, 1, 0)
	res.Resolved = true
	want(t, History{Ops: append(takes[:1:1], res, takes[1])}, Linearizable)
	// Unknown: it may have charged (the take after holds 0), or not.
	unk := rep(10, 50, "k", l, 1, 0)
	unk.Outcome = Unknown
	want(t, History{Ops: append(takes[:1:1], unk, takes[1])}, Linearizable)
	want(t, History{Ops: append(takes[:1:1], unk, at(100, "k", l, Allowed, 1))}, Linearizable)
	// An unknown give-back may have filled the bucket, or not.
	back := rep(10, 50, "k", l, -2, 0)
	back.Outcome = Unknown
	want(t, History{Ops: append(takes[:1:1], back, at(100, "k", l, Allowed, 2))}, Linearizable)
	want(t, History{Ops: append(takes[:1:1], back, at(100, "k", l, Allowed, 1))}, Linearizable)
	// A report is one bucket; a negative cost is a report's only.
	two := rep(10, 50, "k", l, 1, 1)
	two.Buckets = append(two.Buckets, Bucket{Key: "j", Limit: l, Cost: 1})
	neg := at(0, "k", l, Allowed, 2)
	neg.Buckets[0].Cost = -1
	for _, h := range []History{{Ops: []Op{two}}, {Ops: []Op{neg}}} {
		if _, err := Check(h, Options{}); err == nil {
			t.Errorf("%s: no error", h.Ops[0].String())
		}
	}
}

// TestSplitIntoParts: takes that share no bucket are checked apart, the
// verdict and the counterexample's take numbers those of the whole
// history, and a failover's keys go to the parts that hold them.
func TestSplitIntoParts(t *testing.T) {
	l := tb(1, time.Hour, 2)
	h := History{Ops: []Op{
		at(0, "a", l, Allowed, 1),
		at(1, "b", l, Allowed, 1),
		at(10, "a", l, Allowed, 0),
		at(11, "b", l, Allowed, 0),
		at(20, "b", l, Allowed, 0), // past b's limit
		at(21, "a", l, Denied, 0),
	}}
	if ps := split(h); len(ps) != 2 {
		t.Fatalf("%d parts, want 2 (a's takes and b's)", len(ps))
	}
	r := want(t, h, NotLinearizable)
	if !strings.Contains(r.Counterexample, "take 4") {
		t.Errorf("counterexample does not name take 4 (b's third) by its number in the whole history: %s", r.Counterexample)
	}
	if r.Takes != 6 {
		t.Errorf("%d takes checked, want 6", r.Takes)
	}
	h.Ops[4].Outcome, h.Ops[4].Buckets[0].Allowed = Denied, false
	want(t, h, Linearizable)

	// A take on both buckets joins them.
	joined := History{Ops: append(append([]Op(nil), h.Ops...), Op{
		Sent: t0 + 30*int64(time.Millisecond), Answered: t0 + 31*int64(time.Millisecond), Outcome: Denied,
		Buckets: []Bucket{{Key: "a", Limit: l, Cost: 1, Remaining: 0}, {Key: "b", Limit: l, Cost: 1, Remaining: 0}}})}
	if ps := split(joined); len(ps) != 1 {
		t.Fatalf("%d parts, want 1", len(ps))
	}

	// A failover of a and of a key without takes: only a's part has it,
	// with a alone; a restart is in every part.
	h.Resets = []Reset{{From: t0, To: t0 + 1, Keys: []string{"a", "z"}}, {From: t0, To: t0 + 1}}
	for _, p := range split(h) {
		isA := p.h.Ops[0].Buckets[0].Key == "a"
		if isA && (len(p.h.Resets) != 2 || len(p.h.Resets[0].Keys) != 1 || p.h.Resets[0].Keys[0] != "a") {
			t.Errorf("a's part has resets %+v, want the failover of a and the restart", p.h.Resets)
		}
		if !isA && (len(p.h.Resets) != 1 || len(p.h.Resets[0].Keys) != 0) {
			t.Errorf("b's part has resets %+v, want the restart alone", p.h.Resets)
		}
	}
}
