package fallback

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/quota"
)

// charges holds the units this Store admitted locally (FailLocal) that
// the primary's ledger has not been charged yet, and the report calls
// whose reply never came. The units of a key live in owed (guarded by
// Store.mu, the lock local decisions hold); the calls in lost (guarded by
// smu, held by one Sync from start to end).
type charges struct {
	rep      quota.Reporter // nil: the primary takes no report calls
	instance uint64
	seq      atomic.Uint64
	// work is the number of keys owing units plus the lost calls: the
	// one word the healthy path reads to know whether to start a Sync.
	work    atomic.Int64
	running atomic.Bool
	manual  bool
	// failedAt is when a background Sync last failed (unix nanoseconds,
	// system clock): the next waits retryWait, so a primary that answers
	// takes but fails reports is not sent one per take; a failure is
	// logged only if the one before was a second ago or more.
	failedAt atomic.Int64
	limit    int // keys owing at most; units of further keys are dropped

	owed map[string]*owedKey // guarded by Store.mu

	smu  sync.Mutex
	lost []lostCall // guarded by smu

	clock floodgate.Clock // the Store's: when a window algorithm's units were admitted

	charged, debt, failures, dropped, expired, givenBack atomic.Uint64
}

// owedKey is what one key owes the ledger.
type owedKey struct {
	b quota.Bucket // Key, Limit and Rule; Cost unused
	// u is the units admitted locally, not yet charged: a token bucket's
	// or GCRA's; of a window algorithm, the sum over w.
	u int64
	// w is a window algorithm's units by the window they were admitted in,
	// oldest first: at most owedWindows (the current and the previous
	// window on the Store's clock; older ones no longer count).
	w []owedWin
}

// owedWin is what a window algorithm's key owes one window.
type owedWin struct {
	// idx names the window: floor(at / W), at in µs on the Store's clock;
	// of a calendar window (span), its start in µs.
	idx  int64
	at   int64 // µs: the last admission in it, the report's Bucket.Admitted
	u    int64
	span quota.Span // a calendar window (quota.Bucket.Span), or zero
}

// owedWindows is how many windows of a key are kept: the current one and
// the previous one (which a sliding window counts, weighted, and a log in
// part).
const owedWindows = 2

// lostCall is a report call whose reply never came: Resolve says whether
// it was applied.
type lostCall struct {
	seq uint64
	bs  []quota.Bucket // Cost: the units the call charged
}

// retryWait is how long a background Sync waits after one that failed.
const retryWait = 100 * time.Millisecond

// maxReportKeys bounds the keys of one report call.
const maxReportKeys = 64

// reporterOf returns primary as a quota.Reporter when every store down its
// Unwrap chain (quota.Layers) takes report calls, else nil.
func reporterOf(primary quota.Store) quota.Reporter {
	for l := range quota.Layers(primary) {
		if _, ok := l.(quota.Reporter); !ok {
			return nil
		}
	}
	r, _ := primary.(quota.Reporter)
	return r
}

func newCharges(primary quota.Store, limit int, clk floodgate.Clock) *charges {
	c := &charges{rep: reporterOf(primary), limit: limit, owed: make(map[string]*owedKey), clock: clk}
	for c.instance == 0 {
		c.instance = rand.Uint64()
	}
	return c
}

// shareCap is what one instance may owe a key: its share of the
// capacity, C/n, at least 1 (what package tiers/localfirst caps an async
// key's unreported units and debt at). Beyond it, this instance admitted
// at its share of the rate while the store could not be told, the
// store's bucket refilled meanwhile, and charging more would make the key
// pay twice for the same refill.
func shareCap(l quota.Limit, n int) int64 { return max(1, l.Capacity()/int64(n)) }

// addLocked records units admitted locally for b now (Store.mu held), or,
// for a negative count, units to give back (a refund, or a charge the
// primary made for a take that was not admitted): what a key owes is
// capped at the share (shareCap), what it gives back at the capacity (a
// charge the store made and reported, not a refill estimate). A window
// algorithm's units are owed to the window of now on the Store's clock,
// each window capped at twice the share (what a local limiter admits in
// one window: its burst and its refill over the window).
func (c *charges) addLocked(b *quota.Bucket, units int64, n int) {
	var at int64
	if c.rep != nil && units != 0 && !b.Limit.Algorithm.CanBookAhead() {
		at = c.clock.Now().UnixMicro()
	}
	c.addAtLocked(b, units, n, at)
}

// addAtLocked is addLocked of units admitted at at (µs; window
// algorithms only).
func (c *charges) addAtLocked(b *quota.Bucket, units int64, n int, at int64) {
	if c.rep == nil || units == 0 {
		return
	}
	o := c.owed[b.Key]
	if o == nil {
		if len(c.owed) >= c.limit {
			c.dropped.Add(uint64(max(units, -units)))
			return
		}
		nb := quota.Bucket{Key: strings.Clone(b.Key), Rule: b.Rule, Limit: b.Limit, OnStoreError: b.OnStoreError}
		o = &owedKey{b: nb}
		c.owed[nb.Key] = o
		c.work.Add(1)
	}
	if b.Limit.Algorithm.CanBookAhead() {
		o.u = max(-b.Limit.Capacity(), min(o.u+units, shareCap(b.Limit, n)))
	} else {
		c.addWindow(o, units, 2*shareCap(b.Limit, n), at, b.Span)
	}
	if o.u == 0 && len(o.w) == 0 {
		delete(c.owed, b.Key)
		c.work.Add(-1)
	}
}

// addWindow adds units admitted at at (µs) to the window of o that holds
// at (or to the calendar window span), capped at limit (and at −C), after
// dropping the windows that no longer count (over: before the one before
// the window of now, or a calendar window that has ended) and those
// beyond owedWindows; their units are counted as expired, not charged.
func (c *charges) addWindow(o *owedKey, units, limit, at int64, span quota.Span) {
	now := c.clock.Now().UnixMicro()
	c.pruneWindows(o, now)
	nw := owedWin{idx: floorDiv(at, o.b.Limit.Period.Microseconds()), span: span}
	if !span.IsZero() {
		nw.idx = span.Start.UnixMicro()
	}
	k := len(o.w)
	for k > 0 && o.w[k-1].idx > nw.idx {
		k--
	}
	switch {
	case k > 0 && o.w[k-1].idx == nw.idx:
		k--
	case o.over(&nw, now):
		if units > 0 {
			c.expired.Add(uint64(units))
		}
		return
	default:
		o.w = append(o.w, owedWin{})
		copy(o.w[k+1:], o.w[k:])
		o.w[k] = nw
	}
	x := &o.w[k]
	prev := x.u
	x.u = max(-o.b.Limit.Capacity(), min(x.u+units, limit))
	x.at = max(x.at, at)
	o.u += x.u - prev
	if x.u == 0 {
		o.w = append(o.w[:k], o.w[k+1:]...)
	}
	if len(o.w) > owedWindows {
		c.dropWindow(o, 0)
	}
}

// over reports whether window x of o no longer counts at now (µs, the
// Store's clock): it is before the one before the window of now, or a
// calendar window that has ended.
func (o *owedKey) over(x *owedWin, now int64) bool {
	if !x.span.IsZero() {
		return x.span.End.UnixMicro() <= now
	}
	return x.idx < floorDiv(now, o.b.Limit.Period.Microseconds())-1
}

// pruneWindows drops o's windows that no longer count at now (µs).
func (c *charges) pruneWindows(o *owedKey, now int64) {
	for len(o.w) > 0 && o.over(&o.w[0], now) {
		c.dropWindow(o, 0)
	}
}

// admitted is the Bucket.Admitted of x's report: its last admission, and
// within its calendar window (the Limiter that computed the window may
// read another clock).
func (x *owedWin) admitted() time.Time {
	at := x.at
	if !x.span.IsZero() {
		at = min(max(at, x.span.Start.UnixMicro()), x.span.End.UnixMicro()-1)
	}
	return time.UnixMicro(at)
}

// dropWindow drops o's window k, whose units will not be charged.
func (c *charges) dropWindow(o *owedKey, k int) {
	x := o.w[k]
	if x.u > 0 {
		c.expired.Add(uint64(x.u))
	}
	o.u -= x.u
	o.w = append(o.w[:k], o.w[k+1:]...)
}

// abs is what o owes, in units either way (Stats.Owed).
func (o *owedKey) abs() uint64 {
	if len(o.w) == 0 {
		return uint64(max(o.u, -o.u))
	}
	var n uint64
	for _, x := range o.w {
		n += uint64(max(x.u, -x.u))
	}
	return n
}

func floorDiv(a, b int64) int64 {
	q := a / b
	if a%b != 0 && a < 0 {
		q--
	}
	return q
}

// owedLocked is what key owes (Store.mu held).
func (c *charges) owedLocked(key string) int64 {
	if o := c.owed[key]; o != nil {
		return o.u
	}
	return 0
}

// kick starts a Sync in the background unless one runs (or the Store
// syncs by hand, or is closed): the primary just answered, so it can take
// reports.
func (s *Store) kick() {
	c := s.ch
	if c.manual || s.shut.Load() || time.Now().UnixNano()-c.failedAt.Load() < int64(retryWait) || !c.running.CompareAndSwap(false, true) {
		return
	}
	if s.shut.Load() {
		// Closed since the check above: Close, which set shut before
		// waiting for running to clear, may have read it clear already.
		c.running.Store(false)
		return
	}
	go func() {
		defer c.running.Store(false)
		ctx, cancel := context.WithTimeout(context.Background(), 4*s.closedTO)
		defer cancel()
		if err := s.sync(ctx); err != nil {
			now := time.Now().UnixNano()
			prev := c.failedAt.Swap(now)
			if now-prev < int64(time.Second) {
				return // logged less than a second ago
			}
			s.logger.Warn("floodgate: charging the store for units admitted locally failed; they are kept and charged when it answers again",
				"breaker", s.name, "error", err.Error())
		}
	}()
}

// ChargesLocal reports whether the Store charges its primary for the units
// it admits locally (on_store_error local): whether the primary, and every
// store beneath it (quota.Layers), is a quota.Reporter. New logs a warning
// when it is not.
func (s *Store) ChargesLocal() bool { return s.ch.rep != nil }

// Sync charges the primary now for every unit admitted locally that it
// has not been charged, after asking it (Resolve) about the report calls
// whose reply never came. The Store runs it in the background whenever the
// primary answers a Take while something is owed; it is exported for a
// measurement or a planned hand-over that wants the ledger up to date
// (before a process exits, call Close, which stops the background work
// and then runs Sync), so it first waits, until ctx ends, for the calls
// still running late (see Late answers in the package doc) to be
// answered and matched with their local decisions: a take denied locally
// that the primary applies after the process is gone would stay charged.
// It sends nothing while the breaker is open, and its calls never count
// against the breaker. It returns the calls' errors; what they did not
// charge stays owed.
func (s *Store) Sync(ctx context.Context) error {
	for s.lateOpen.Load() > 0 && ctx.Err() == nil {
		time.Sleep(time.Millisecond)
	}
	return s.sync(ctx)
}

// sync is Sync without the wait for late calls: the background charge
// after an answer does not hold the reports of other units for them.
func (s *Store) sync(ctx context.Context) error {
	c := s.ch
	if c.rep == nil {
		return nil
	}
	c.smu.Lock()
	defer c.smu.Unlock()
	if !s.closed.Load() && !s.halfOpen.Load() {
		return nil
	}
	if err := s.resolveLost(ctx); err != nil {
		return err
	}
	inst := max(1, s.instances())
	// A key's windows go in different calls (a call names a key once):
	// rounds[j] holds the j-th owed window of every window key, and
	// rounds[0] every token bucket and GCRA key.
	var rounds [owedWindows][]quota.Bucket
	now := s.clock.Now().UnixMicro()
	s.mu.Lock()
	for k, o := range c.owed {
		if o.b.Limit.Algorithm.CanBookAhead() {
			b := o.b
			b.Cost = o.u
			rounds[0] = append(rounds[0], b)
		} else {
			c.pruneWindows(o, now)
		}
		for j := range o.w {
			x := &o.w[j]
			b := o.b
			b.Cost, b.Admitted, b.Span = x.u, x.admitted(), x.span
			rounds[j] = append(rounds[j], b)
		}
		delete(c.owed, k)
		c.work.Add(-1)
	}
	s.mu.Unlock()
	var errs []error
	for _, jobs := range rounds {
		for len(jobs) > 0 {
			k := min(len(jobs), maxReportKeys)
			if err := s.report(ctx, jobs[:k:k], inst); err != nil {
				errs = append(errs, err)
			}
			jobs = jobs[k:]
		}
	}
	return errors.Join(errs...)
}

// report sends one report call. What the store could not charge (its
// bucket was empty: debt) is owed again, capped at the share; the keys of
// a call whose reply never came wait for Resolve.
func (s *Store) report(ctx context.Context, bs []quota.Bucket, inst int) error {
	c := s.ch
	seq := c.seq.Add(1)
	out := make([]quota.ReportResult, len(bs))
	cctx, cancel := context.WithTimeout(ctx, s.closedTO)
	err := c.rep.Report(cctx, c.instance, seq, bs, out)
	cancel()
	now := s.clock.Now()
	var lost []quota.Bucket
	s.mu.Lock()
	for i := range bs {
		switch {
		case out[i].Applied:
			s.chargedLocked(&bs[i], out[i].Charged, inst)
			if sp := bs[i].Span; sp.IsZero() || now.Before(sp.End) {
				// (What an ended calendar window has left says
				// nothing of the current one.)
				s.seen.recordOne(bs[i].Key, out[i].Remaining, now)
			}
		case err != nil:
			lost = append(lost, bs[i])
		default: // refused whole: owed again
			c.oweAgainLocked(&bs[i], bs[i].Cost, inst)
		}
	}
	s.mu.Unlock()
	if len(lost) > 0 {
		c.failures.Add(1)
		c.lost = append(c.lost, lostCall{seq: seq, bs: lost})
		c.work.Add(1)
	}
	if err != nil {
		return fmt.Errorf("fallback: report: %w", err)
	}
	return nil
}

// chargedLocked records that b's report charged charged of its Cost
// (Store.mu held): the rest is debt, owed again; of a window algorithm's
// bucket, the rest was admitted in a window that is over, and is not
// owed (charging it cannot matter).
func (s *Store) chargedLocked(b *quota.Bucket, charged int64, inst int) {
	c := s.ch
	c.charged.Add(uint64(max(0, charged)))
	c.givenBack.Add(uint64(max(0, -charged)))
	d := b.Cost - charged
	switch {
	case d <= 0:
	case !b.Limit.Algorithm.CanBookAhead():
		c.expired.Add(uint64(d))
	default:
		c.debt.Add(uint64(d))
		c.addLocked(b, d, inst)
	}
}

// oweAgainLocked records that b's report was not applied (Store.mu held):
// its units are owed again, a window algorithm's to the window they were
// admitted in.
func (c *charges) oweAgainLocked(b *quota.Bucket, units int64, inst int) {
	var at int64
	if !b.Admitted.IsZero() {
		at = b.Admitted.UnixMicro()
	}
	c.addAtLocked(b, units, inst, at)
}

// resolveLost asks the ledger what each lost call did (smu held): what it
// charged is done, what it did not is owed again. It stops at the first
// call the ledger cannot answer for (it is likely down again).
func (s *Store) resolveLost(ctx context.Context) error {
	c := s.ch
	inst := max(1, s.instances())
	for len(c.lost) > 0 {
		l := c.lost[0]
		out := make([]quota.ReportResult, len(l.bs))
		cctx, cancel := context.WithTimeout(ctx, s.closedTO)
		err := c.rep.Resolve(cctx, c.instance, l.seq, l.bs, out)
		cancel()
		if err != nil {
			return fmt.Errorf("fallback: resolve report %d: %w", l.seq, err)
		}
		s.mu.Lock()
		for i := range l.bs {
			if out[i].Applied {
				s.chargedLocked(&l.bs[i], out[i].Charged, inst)
			} else {
				c.oweAgainLocked(&l.bs[i], l.bs[i].Cost, inst)
			}
		}
		s.mu.Unlock()
		c.lost = c.lost[1:]
		c.work.Add(-1)
	}
	return nil
}
