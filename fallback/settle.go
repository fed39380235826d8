package fallback

import (
	"context"
	"errors"
	"fmt"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/quota"
)

var _ quota.Settler = (*Store)(nil)

// CanSettle reports whether the primary store can settle (it is a
// quota.Settler that, if it wraps another store, can too): what
// quota.Settles asks of a Store before a Limiter lets rules settle or
// wait over it. Buckets decided locally are settled here whatever the
// primary.
func (s *Store) CanSettle() bool { return quota.Settles(s.primary) }

// Unwrap returns the primary store (see quota.Layers): capability checks
// look through a Store at what it guards.
func (s *Store) Unwrap() quota.Store { return s.primary }

// Settle implements quota.Settler. Each bucket is settled where its
// charge was made, by the Source of its Result in took:
//
//   - floodgate.SourceLocalFallback: on its local limiter, at the
//     injected clock's now: a charge takes the units from the limiter's
//     tokens, below 0 if it must (debt, which later local decisions wait
//     out); a refund puts them back, capped at the local burst. A bucket
//     whose limiter is gone (evicted from the LRU) is not settled.
//   - floodgate.SourceFailOpen, SourceFailClosed: nothing was charged;
//     nothing is settled.
//   - anything else (the primary decided; took nil means all did): by
//     the primary's Settle, within the closed budget (WithClosedTimeout:
//     a settlement is not on a request's decision path). It is not sent
//     while the breaker is open, and neither then nor when it fails is it
//     counted against the breaker or retried; Stats counts it
//     (SettleDropped, SettleFailed) and the error is returned.
//
// Bad input is refused with quota.ValidateSettle's error before anything
// is settled.
func (s *Store) Settle(ctx context.Context, buckets []quota.Bucket, took []quota.Result) error {
	if err := quota.ValidateSettle(buckets, took); err != nil {
		return err
	}
	primary := 0
	for i := range buckets {
		if buckets[i].Cost == 0 {
			continue
		}
		switch src := sourceOf(took, i); src {
		case floodgate.SourceLocalFallback:
			s.settleLocal(&buckets[i])
		case floodgate.SourceFailOpen, floodgate.SourceFailClosed:
		default:
			primary++
		}
	}
	if primary == 0 {
		return nil
	}
	bs, rs := buckets, took
	if primary != len(buckets) {
		bs, rs = make([]quota.Bucket, 0, primary), nil
		if took != nil {
			rs = make([]quota.Result, 0, primary)
		}
		for i := range buckets {
			switch src := sourceOf(took, i); {
			case buckets[i].Cost == 0, src == floodgate.SourceLocalFallback, src == floodgate.SourceFailOpen, src == floodgate.SourceFailClosed:
				continue
			}
			bs = append(bs, buckets[i])
			if took != nil {
				rs = append(rs, took[i])
			}
		}
	}
	st, ok := s.primary.(quota.Settler)
	if !ok {
		s.c.settleFailed.Add(1)
		return errors.New("fallback: Settle: the primary store is not a quota.Settler")
	}
	if !s.closed.Load() && !s.halfOpen.Load() {
		s.c.settleDropped.Add(1)
		return errors.New("fallback: Settle: the breaker is open; the settlement of the store's buckets is dropped")
	}
	cctx, cancel := context.WithTimeout(ctx, s.closedTO)
	err := st.Settle(cctx, bs, rs)
	cancel()
	if err != nil {
		s.c.settleFailed.Add(1)
		return fmt.Errorf("fallback: Settle: %w", err)
	}
	s.c.settled.Add(1)
	return nil
}

// sourceOf is the Source of bucket i's charge (the store's, when took is
// nil or says nothing).
func sourceOf(took []quota.Result, i int) floodgate.Source {
	if took == nil || took[i].Source == "" {
		return floodgate.SourceStore
	}
	return took[i].Source
}

// settleLocal applies b's signed cost to its local limiter, if it still
// has one.
func (s *Store) settleLocal(b *quota.Bucket) {
	s.mu.Lock()
	defer s.mu.Unlock()
	el, ok := s.local.byKey[b.Key]
	if !ok {
		return
	}
	e := el.Value.(*localEntry)
	now := s.clock.Now()
	d := b.Cost
	// What the store is owed for the key follows the settlement.
	s.ch.addLocked(b, d, e.n)
	if d < 0 {
		// x/time/rate has no method that adds tokens: a reservation of a
		// negative count does (tokens - n), and the next read caps them at
		// the burst. TestSettleLocal pins this.
		for d < 0 {
			k := max(d, -maxReserve)
			e.lim.ReserveN(now, int(k))
			d -= k
		}
		s.c.localSettled.Add(1)
		return
	}
	// A reservation of at most the burst always succeeds and may take
	// the tokens below 0: the debt later local decisions wait out.
	for d > 0 {
		k := min(d, e.burst)
		e.lim.ReserveN(now, int(k))
		d -= k
	}
	s.c.localSettled.Add(1)
}

// maxReserve bounds one negative reservation (an int on every platform).
const maxReserve = 1 << 30
