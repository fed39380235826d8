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

	charged, debt, failures, dropped, unsupported, givenBack atomic.Uint64
}

// owedKey is what one key owes the ledger.
type owedKey struct {
	b quota.Bucket // Key, Limit and Rule; Cost unused
	u int64        // units admitted locally, not yet charged
}

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

func newCharges(primary quota.Store, limit int) *charges {
	c := &charges{rep: reporterOf(primary), limit: limit, owed: make(map[string]*owedKey)}
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

// addLocked records units admitted locally for b (Store.mu held), or, for
// a negative count, units to give back (a refund, or a charge the primary
// made for a take that was not admitted): what a key owes is capped at
// the share (shareCap), what it gives back at the capacity (a charge the
// store made and reported, not a refill estimate).
func (c *charges) addLocked(b *quota.Bucket, units int64, n int) {
	if c.rep == nil || units == 0 {
		return
	}
	if !b.Limit.Algorithm.CanBookAhead() {
		if units > 0 {
			c.unsupported.Add(uint64(units))
		}
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
	o.u = max(-b.Limit.Capacity(), min(o.u+units, shareCap(b.Limit, n)))
	if o.u == 0 {
		delete(c.owed, b.Key)
		c.work.Add(-1)
	}
}

// owedLocked is what key owes (Store.mu held).
func (c *charges) owedLocked(key string) int64 {
	if o := c.owed[key]; o != nil {
		return o.u
	}
	return 0
}

// kick starts a Sync in the background unless one runs (or the Store
// syncs by hand): the primary just answered, so it can take reports.
func (s *Store) kick() {
	c := s.ch
	if c.manual || time.Now().UnixNano()-c.failedAt.Load() < int64(retryWait) || !c.running.CompareAndSwap(false, true) {
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
// measurement or a planned hand-over (a process about to exit) that wants
// the ledger up to date, so it first waits, until ctx ends, for the calls
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
	var jobs []quota.Bucket
	s.mu.Lock()
	for k, o := range c.owed {
		b := o.b
		b.Cost = o.u
		jobs = append(jobs, b)
		delete(c.owed, k)
		c.work.Add(-1)
	}
	s.mu.Unlock()
	var errs []error
	for len(jobs) > 0 {
		k := min(len(jobs), maxReportKeys)
		if err := s.report(ctx, jobs[:k:k], inst); err != nil {
			errs = append(errs, err)
		}
		jobs = jobs[k:]
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
			s.seen.recordOne(bs[i].Key, out[i].Remaining, now)
		case err != nil:
			lost = append(lost, bs[i])
		default: // refused whole: owed again
			c.addLocked(&bs[i], bs[i].Cost, inst)
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
// (Store.mu held): the rest is debt, owed again.
func (s *Store) chargedLocked(b *quota.Bucket, charged int64, inst int) {
	c := s.ch
	c.charged.Add(uint64(max(0, charged)))
	c.givenBack.Add(uint64(max(0, -charged)))
	if d := b.Cost - charged; d > 0 {
		c.debt.Add(uint64(d))
		c.addLocked(b, d, inst)
	}
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
				c.addLocked(&l.bs[i], l.bs[i].Cost, inst)
			}
		}
		s.mu.Unlock()
		c.lost = c.lost[1:]
		c.work.Add(-1)
	}
	return nil
}
