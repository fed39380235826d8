package localfirst

import (
	"context"
	"errors"
	"math"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/quota"
)

var _ quota.Settler = (*Store)(nil)

// CanSettle reports whether the exact store can settle: what
// quota.Settles asks before a Limiter lets rules settle or wait over this
// Store. Leased and async buckets decided here are settled here whatever
// the exact store.
func (s *Store) CanSettle() bool { return quota.Settles(s.exact) }

// Unwrap returns the exact store (see quota.Layers): capability checks
// look through a Store at the store it sends exact buckets to.
func (s *Store) Unwrap() quota.Store { return s.exact }

// DecidesConsistency reports whether the Store decides buckets of
// consistency c itself: Leased and Async. Package tiers refuses a policy
// with leased or async rules over a store none of whose layers
// (quota.Layers) does.
func (s *Store) DecidesConsistency(c quota.Consistency) bool {
	return c == quota.Leased || c == quota.Async
}

// Settle implements quota.Settler: each bucket's signed Cost is settled
// where its charge was made, by the Source of its Result in took (nil:
// the exact store charged every bucket):
//
//   - Leased, charged by the lease or by a take that leased from the
//     store (Source lease or store): a refund goes into the lease (units
//     taken from the store are this instance's to spend, or to give back
//     when the lease ends); a charge is paid from the lease, and what the
//     lease cannot pay is charged to the exact store (debt there).
//   - Async, decided here (Source async): the settlement counts as hits
//     (a charge, to be reported) or as a credit against them (a refund),
//     and moves this instance's share by the same amount: a charge beyond
//     it is debt the next local decisions wait out, a refund is capped
//     at the share.
//   - Everything else (exact buckets, cold async keys, buckets the exact
//     store's own fallback decided, keys not held here): the exact
//     store's Settle, with its Result.
//
// Bad input is refused with quota.ValidateSettle's error before anything
// is settled.
func (s *Store) Settle(ctx context.Context, buckets []quota.Bucket, took []quota.Result) error {
	if err := quota.ValidateSettle(buckets, took); err != nil {
		return err
	}
	now := s.cfg.clock.Now()
	n := max(1, s.cfg.instances())
	var (
		sbuf [maxStack]quota.Bucket
		rbuf [maxStack]quota.Result
	)
	exact, exactRes := sbuf[:0], rbuf[:0]
	for i := range buckets {
		b := buckets[i]
		if b.Cost == 0 {
			continue
		}
		var res quota.Result
		if took != nil {
			res = took[i]
		}
		if rest, local := s.settleLocal(&b, res.Source, now, n); local {
			if rest == 0 {
				continue
			}
			b.Cost = rest // what the lease could not pay
		}
		exact = append(exact, b)
		exactRes = append(exactRes, res)
	}
	if len(exact) == 0 {
		return nil
	}
	st, ok := s.exact.(quota.Settler)
	if !ok {
		return errors.New("localfirst: Settle: the exact store is not a quota.Settler")
	}
	if took == nil {
		exactRes = nil
	}
	return st.Settle(ctx, exact, exactRes)
}

// settleLocal settles b on the local state of its key when its charge
// was made there; local reports whether it was, and rest what is left to
// charge to the exact store.
func (s *Store) settleLocal(b *quota.Bucket, src floodgate.Source, now time.Time, n int) (rest int64, local bool) {
	switch {
	case b.Consistency == quota.Leased && (src == floodgate.SourceLease || src == floodgate.SourceStore || src == ""):
	case b.Consistency == quota.Async && src == floodgate.SourceAsync:
	default:
		return 0, false
	}
	sh := s.shardOf(b.Key)
	sh.mu.Lock()
	e, ok := sh.entries[b.Key]
	sh.mu.Unlock()
	if !ok {
		return 0, false
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.dropped || e.limit != b.Limit || e.mode != b.Consistency {
		return 0, false // the key was dropped or reset since: its charge is the store's
	}
	d := b.Cost
	if b.Consistency == quota.Leased {
		if d < 0 {
			if e.units == 0 {
				e.expires = now.Add(s.cfg.leaseTTL)
				e.sooner(e.expires)
			}
			e.units += -d
			s.mark(e)
			return 0, true
		}
		paid := min(d, e.units)
		e.units -= paid
		return d - paid, true
	}
	e.refill(now, n)
	e.spend(d, now)
	e.tok = math.Min(e.tok-float64(d), float64(e.capacity())/float64(n))
	if e.u > 0 {
		e.sooner(e.lastReport.Add(e.reportEvery()))
		s.mark(e)
	}
	return 0, true
}
