package localfirst

import (
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/quota"
)

// entry is the local state of one bucket key.
type entry struct {
	mu      sync.Mutex
	touched time.Time // guarded by Store.mu
	queued  bool      // pending (on the Store's wheel, or taken by a Sync); guarded by mu
	// dropped: taken out of its shard's map (swept or evicted, idle). A
	// Take that found the entry before then looks for its key again
	// rather than spend this one, which no Sync would see again while a
	// new entry of the key did: two entries of one key in a report call,
	// which the ledger refuses. Guarded by mu.
	dropped bool
	// wake is when Sync next needs to look at the entry (Unix ns; 0: at
	// the next Sync): its next report or lease expiry. It is written
	// under mu; takes only move it earlier, and then mark files the entry
	// earlier on the timing wheel.
	wake atomic.Int64
	// at is where the entry is filed on the wheel (a tick, atNow or
	// atNone); written under Store.pmu, read without it by mark.
	at    atomic.Int64
	state // guarded by mu
}

// sooner moves e's wake to t if t is earlier; e.mu is held. The caller
// then marks e, which files it earlier on the wheel if need be.
func (e *entry) sooner(t time.Time) {
	if w := t.UnixNano(); w < e.wake.Load() {
		e.wake.Store(w)
	}
}

// nextWake is when Sync next needs e, from what it holds and owes now;
// e.mu is held.
func (e *entry) nextWake() int64 {
	if e.owed > 0 || e.inflight > 0 {
		return 0
	}
	w := int64(math.MaxInt64)
	if e.units > 0 {
		w = e.expires.UnixNano()
	}
	if e.u > 0 {
		w = min(w, e.lastReport.Add(e.reportEvery()).UnixNano())
	}
	return w
}

// tmpl is what an entry keeps of the bucket it last saw, to send in its
// reports and returns (bucket): the fields a leased or async bucket
// sets, less its limit (state.limit) and cost. A whole quota.Bucket is
// 176 bytes, most of it fields such a bucket never sets (a calendar
// Span, Admitted: window algorithms are refused in these modes), and an
// entry is kept per key: the collector marks them all on every cycle.
type tmpl struct {
	key, rule       string
	sync, maxWait   time.Duration
	onErr           quota.FailMode
	cons            quota.Consistency
	denials, atMost bool
}

// tmplOf is what an entry keeps of b.
func tmplOf(b *quota.Bucket) tmpl {
	return tmpl{key: b.Key, rule: b.Rule, sync: b.SyncInterval, maxWait: b.MaxWait, onErr: b.OnStoreError,
		cons: b.Consistency, denials: b.CacheDenials, atMost: b.AtMost}
}

// bucket is the bucket the entry last saw, at cost 0: what its reports
// and returns send (with their cost).
func (e *entry) bucket() quota.Bucket {
	t := &e.t
	return quota.Bucket{Key: t.key, Limit: e.limit, Rule: t.rule, SyncInterval: t.sync, MaxWait: t.maxWait,
		OnStoreError: t.onErr, Consistency: t.cons, CacheDenials: t.denials, AtMost: t.atMost}
}

// state is what an entry knows of its key.
type state struct {
	t     tmpl // the bucket as last seen, less its limit and cost (bucket)
	limit quota.Limit
	mode  quota.Consistency

	// Leased.
	units     int64     // leased units not yet spent
	expires   time.Time // when units go back
	owed      int64     // expired units still to give back
	returning int64     // units a return under way gives back
	last      int64     // the extra units of the last lease
	leasedAt  time.Time // when the last lease (or the first take) was granted
	demand    int64     // units asked for since leasedAt
	// deniedUntil: the store denied the key until then; takes that the
	// lease cannot pay are denied locally meanwhile, without asking.
	deniedUntil time.Time
	denied      quota.Result
	gather      int64 // units the last deny waited to gather for the next lease
	// headroom: the store's bucket after the last lease, over its
	// capacity (0 to 1); see target.
	headroom float64

	// Async.
	known bool
	// assumed: the key was new to this instance, which took its share
	// as full (C/n) instead of asking the store; the first report's
	// reply replaces the assumption with the store's state.
	assumed bool
	// tok is this instance's share of the bucket, as a local token bucket
	// of capacity C/n refilling at rate/n: set to r/n less what is
	// unreported when the store answers, spent by local admits, refilled
	// at tokAt. Refill beyond the cap is lost, spending never is, so a
	// long outage admits the share's rate, not only its capacity.
	tok   float64
	tokAt time.Time
	// carryFrom, when not zero, is the limit tok was kept under before
	// the key's limit changed: the next decision refills tok under it
	// and carries its consumption to the new limit (carry).
	carryFrom  quota.Limit
	u          int64 // admitted here, not yet reported (debt included)
	inflight   int64 // units of the report under way
	lastReport time.Time
	// When the report fell due, for its lag (Unix ns: no pointer to
	// write on every hit). A key's cadence only shortens as u rises, so a
	// report falls due either by time (its interval after the last report
	// runs out) or by a rise of u that finds the interval already run
	// out. raised is the last rise that found the key not due; dueAt,
	// when not 0, is the moment a later rise found it had fallen due:
	// so a key hit again after a long idle spell is due from that hit,
	// and hits while a Sync is late do not hide its lag.
	raised, dueAt int64
}

// reset makes e the fresh state of b: a key whose limit or consistency
// changed starts over (what it held goes back first, see Sync), except
// that an Async share whose limit changed keeps what it spent, as the
// store's bucket does (quota.Algorithm, "Limit changes"): a raise gives
// its room at once, a cut takes effect at once.
func (e *entry) reset(b *quota.Bucket, now time.Time) {
	owed, returning, u, inflight := e.owed+e.units, e.returning, e.u, e.inflight
	keep := e.mode == quota.Async && b.Consistency == quota.Async && e.known
	was, assumed, tok, tokAt := e.limit, e.assumed, e.tok, e.tokAt
	e.state = state{}
	e.t = tmplOf(b)
	e.limit, e.mode = b.Limit, b.Consistency
	e.owed, e.returning, e.u, e.inflight = owed, returning, u, inflight
	e.lastReport = now
	if keep {
		e.known, e.assumed, e.tok, e.tokAt, e.carryFrom = true, assumed, tok, tokAt, was
	}
}

// carry brings a share kept across a limit change (carryFrom) to now:
// refilled under the old limit to now and capped at its C/n, then moved
// by the change of C/n, so what it spent stays spent.
func (e *entry) carry(now time.Time, n int) {
	old := e.carryFrom
	e.carryFrom = quota.Limit{}
	if el := now.Sub(e.tokAt); el > 0 {
		e.tok += float64(old.Rate) / float64(old.Period) * float64(el) / float64(n)
		e.tokAt = now
	}
	e.tok = math.Min(e.tok, float64(old.Capacity())/float64(n))
	e.tok += float64(e.capacity()-old.Capacity()) / float64(n)
}

func (e *entry) capacity() int64 { return e.limit.Capacity() }

// unitNanos is how long l takes to refill one unit, in nanoseconds
// (l.Rate > 0).
func unitNanos(l quota.Limit) float64 { return float64(l.Period) / float64(l.Rate) }

// perNano is the bucket's refill rate in units per nanosecond.
func (e *entry) perNano() float64 {
	return float64(e.limit.Rate) / float64(e.limit.Period)
}

// reserveLease spends b's cost from the lease when it holds enough (local);
// denies when the store denied the key moments ago (deny, res filled);
// and otherwise says how many extra units to lease with the request, which
// then goes to the store.
func (e *entry) reserveLease(b *quota.Bucket, now time.Time, n int, c *config, res *quota.Result) (local bool, extra int64, deny bool) {
	if e.units > 0 && !now.Before(e.expires) {
		e.owed += e.units
		e.units = 0
	}
	e.demand += b.Cost
	if b.Cost > 0 && e.units >= b.Cost {
		e.units -= b.Cost
		*res = quota.Result{Allowed: true, Limit: e.capacity(), Remaining: e.units, Source: floodgate.SourceLease}
		return true, 0, false
	}
	if now.Before(e.deniedUntil) {
		*res = e.denied
		res.RetryAfter = e.deniedUntil.Sub(now)
		return false, 0, true
	}
	*res = quota.Result{}
	return false, e.nextLease(b.Cost, now, n, c), false
}

// deny remembers that the store denied the key a request of cost, so
// takes the lease cannot pay are denied without asking it again: until
// the request's units have refilled (the result's retry-after), and, for
// a key that was asked for more than it refills, until the lease its
// demand wants has refilled too, for at most the lease target; the next
// lease may then take all of those units at once. A key whose demand
// outruns its refill so takes its units a lease at a time (one or two
// store calls each lease target) rather than one store call per unit
// refilled, and admits as much: the wait lets at most share × capacity
// ÷ n units gather in the store's bucket, so the bucket never fills and
// no refill is lost.
func (e *entry) deny(r quota.Result, cost int64, now time.Time, n int, c *config) {
	if r.RetryAfter <= 0 {
		return
	}
	until := now.Add(r.RetryAfter)
	e.gather = 0
	if want := e.leaseWant(cost, now, n, c, false); want > 0 && e.limit.Rate > 0 {
		unit := unitNanos(e.limit)
		// at most a lease target's refill
		if most := int64(float64(c.leaseTarget) / unit); want > most {
			want = most
		}
		if want > 0 {
			e.gather = want
			until = until.Add(ceilDur(float64(want) * unit))
		}
	}
	e.deniedUntil = until
	e.denied = r
	e.denied.Source = floodgate.SourceLease
}

// nextLease sizes the extra units of the next lease: the key's demand
// since the last lease over its target (see target), at most twice the last
// lease (at least 1 once the key is warm) or what a deny waited to
// gather, at most share × capacity ÷ n less the request's own cost. A
// cold key leases nothing.
func (e *entry) nextLease(cost int64, now time.Time, n int, c *config) int64 {
	return e.leaseWant(cost, now, n, c, true)
}

// leaseWant is nextLease, with the growth cap or without it.
func (e *entry) leaseWant(cost int64, now time.Time, n int, c *config, growth bool) int64 {
	if e.leasedAt.IsZero() {
		return 0
	}
	limit := int64(math.Floor(c.leaseShare*float64(e.capacity())/float64(n))) - cost
	if limit <= 0 {
		return 0
	}
	want := math.Inf(1)
	if growth {
		want = float64(max(1, 2*e.last, e.gather))
	}
	if el := now.Sub(e.leasedAt); el > 0 {
		want = math.Min(want, math.Ceil(float64(e.demand)*float64(e.target(c))/float64(el)))
	}
	if math.IsInf(want, 1) { // no time since the last lease: no rate to go by
		return 0
	}
	return min(int64(want), limit)
}

// target is how long the next lease should last at the key's demand:
// the lease target, and up to half the lease TTL for a key whose bucket
// was far from empty when it last leased (headroom: what the bucket held
// then, over its capacity). Units held cost other instances nothing while
// the bucket has plenty left, and a longer lease spares the store a take;
// as the key nears its limit its leases shorten to the lease target, so
// what instances hold unspent stays small against what is left.
func (e *entry) target(c *config) time.Duration {
	return max(c.leaseTarget, time.Duration(e.headroom*float64(c.leaseTTL/2)))
}

// granted records a take the store allowed for a lease bucket: the extra
// units are the new lease, remaining what the store's bucket held after
// it.
func (e *entry) granted(extra, remaining int64, now time.Time, c *config) {
	e.headroom = 0
	if cp := e.capacity(); cp > 0 && remaining > 0 {
		e.headroom = min(1, float64(remaining)/float64(cp))
	}
	if extra > 0 {
		e.units += extra
		e.expires = now.Add(c.leaseTTL)
		e.sooner(e.expires)
	}
	e.last = extra
	e.leasedAt = now
	e.demand = 0
	e.gather = 0
}

// reserveAsync decides b on the last known state. A key new to this
// instance starts from a full share (C/n), as a key whose last report
// found a full bucket, and reported at the same headroom cadence. cold
// asks the store (the cost is more than this instance's share could ever
// hold); deny is a local deny, with res filled.
func (e *entry) reserveAsync(b *quota.Bucket, now time.Time, n int, res *quota.Result) (local, cold, deny bool) {
	c := float64(e.capacity())
	if float64(b.Cost) > c/float64(n) {
		*res = quota.Result{}
		return false, true, false
	}
	if !e.known {
		e.known, e.assumed = true, true
		e.tok, e.tokAt = c/float64(n)-float64(e.u+e.inflight), now
	}
	if e.carryFrom != (quota.Limit{}) {
		e.carry(now, n)
	}
	e.refill(now, n)
	// Short by need units of this instance's share, which refills at
	// rate/n; a bucket that may wait books them when they come in time.
	var wait time.Duration
	if need := float64(b.Cost) - e.tok; need > 0 && b.MaxWait > 0 {
		if w := ceilMicro(ceilDur(need * float64(n) / e.perNano())); w <= b.MaxWait {
			wait = w
		}
	}
	if e.tok >= float64(b.Cost) || wait > 0 {
		e.tok -= float64(b.Cost)
		e.spend(b.Cost, now)
		// Every report waits at least a quarter interval: a key whose
		// wake is already that soon needs no arithmetic here.
		if soonest := e.lastReport.UnixNano() + int64(e.t.sync/4); e.wake.Load() > soonest {
			e.sooner(e.lastReport.Add(e.reportEvery()))
		}
		*res = quota.Result{Allowed: true, Limit: e.capacity(), Remaining: int64(math.Max(0, math.Floor(e.tok))), Wait: wait, Source: floodgate.SourceAsync}
		return true, false, false
	}
	need := float64(b.Cost) - e.tok
	retry := ceilDur(need * float64(n) / e.perNano())
	*res = quota.Result{Limit: e.capacity(), Remaining: int64(math.Max(0, math.Floor(e.tok))), RetryAfter: max(retry, time.Microsecond), Source: floodgate.SourceAsync}
	return false, false, true
}

// spend counts cost units admitted here at now, unreported (a negative
// cost: given back).
func (e *entry) spend(cost int64, now time.Time) {
	if cost > 0 {
		e.rise(now)
	}
	e.u += cost
}

// rise notes, before u rises at now, when the key's report fell due (see
// raised and dueAt).
func (e *entry) rise(now time.Time) {
	if e.dueAt != 0 {
		return
	}
	ns := now.UnixNano()
	// The wake is never after the report's due time (see nextWake and
	// its callers): before it, the key is not due, without arithmetic.
	if e.u > 0 && ns >= e.wake.Load() {
		if d := e.lastReport.Add(e.reportEvery()).UnixNano(); ns >= d {
			e.dueAt = max(d, e.raised)
			return
		}
	}
	e.raised = ns
}

// dueSince is when e's report fell due, e being due now.
func (e *entry) dueSince(every time.Duration) int64 {
	if e.dueAt != 0 {
		return e.dueAt
	}
	return max(e.lastReport.Add(every).UnixNano(), e.raised)
}

// refill brings the share's tokens to now, capped at C/n.
func (e *entry) refill(now time.Time, n int) {
	if el := now.Sub(e.tokAt); el > 0 {
		e.tok += e.perNano() * float64(el) / float64(n)
		e.tokAt = now
	}
	e.tok = math.Min(e.tok, float64(e.capacity())/float64(n))
}

// learn records the store's remaining units for the key at now: this
// instance's share is then remaining/n less what it admitted and has not
// reported.
func (e *entry) learn(remaining float64, now time.Time, n int) {
	e.known, e.assumed, e.carryFrom = true, false, quota.Limit{}
	e.tok = remaining/float64(n) - float64(e.u+e.inflight)
	e.tokAt = now
}

// cancel gives back a local reservation of cost.
func (e *entry) cancel(mode quota.Consistency, cost int64) {
	if mode == quota.Leased {
		e.units += cost
		return
	}
	e.u -= cost
	e.tok += float64(cost)
}

// idle reports whether e holds and owes nothing.
func (e *entry) idle() bool {
	return e.units == 0 && e.owed == 0 && e.returning == 0 && e.u <= 0 && e.inflight == 0
}

// ceilMicro rounds d up to a whole microsecond, the stores' resolution.
func ceilMicro(d time.Duration) time.Duration {
	if r := d % time.Microsecond; r != 0 {
		d += time.Microsecond - r
	}
	return d
}
