package localfirst

import (
	"context"
	"math"
	"time"

	"github.com/floodgate-go/floodgate/quota"
)

// Partial grants (quota.Bucket.AtMost) of leased and async buckets are
// decided from the local share: the grant is the least of the Cost and
// what each AtMost bucket holds here (a leased bucket's unspent lease,
// an async bucket's share of tokens), and every AtMost bucket is then
// charged that amount (never above a bucket's capacity), all or nothing,
// as a take of fixed cost is (locally
// when the share pays it, else by the exact store). An AtMost bucket whose
// share this instance does not know (no lease, an expired one) does not
// bound the grant; when the store denies it, the take is asked once more
// at what the store said remains, if that is at least one unit. Takes
// whose AtMost buckets are all exact go to the exact store as they are.

// localAtMost reports whether a leased or async bucket of the take asks
// for a partial grant.
func localAtMost(buckets []quota.Bucket) bool {
	for i := range buckets {
		if buckets[i].AtMost && buckets[i].Consistency != quota.Exact {
			return true
		}
	}
	return false
}

// takeAtMost decides a take with a leased or async AtMost bucket (see
// above), the arguments already validated.
func (s *Store) takeAtMost(ctx context.Context, buckets []quota.Bucket, res []quota.Result) (bool, error) {
	now := s.cfg.clock.Now()
	n := max(1, s.cfg.instances())
	most := int64(0)
	g := int64(math.MaxInt64)
	for i := range buckets {
		b := &buckets[i]
		if !b.AtMost {
			continue
		}
		most = b.Cost
		g = min(g, b.Limit.Capacity()) // more is never granted
		if b.Consistency == quota.Exact {
			continue
		}
		if e := s.entry(b, now); e != nil {
			e.mu.Lock()
			if a := e.localAvail(b, now, n); a >= 0 {
				g = min(g, a)
			}
			e.mu.Unlock()
		}
	}
	g = min(g, most)
	if most > 0 {
		g = max(1, g)
	}
	bs := make([]quota.Bucket, len(buckets))
	copy(bs, buckets)
	ok, err := s.takeFixed(ctx, bs, buckets, res, g)
	if err != nil || ok || g <= 1 {
		return ok, err
	}
	// Denied: by a bucket whose remaining (as it stands) is short of g
	// but not nothing, ask once more at that.
	g1 := g
	for i := range buckets {
		if buckets[i].AtMost && !res[i].Allowed {
			g1 = min(g1, res[i].Remaining)
		}
	}
	if g1 < 1 || g1 >= g {
		return false, nil
	}
	// The store's deny was of g units: the fewer are asked of it, not
	// denied by a lease's memory of that deny.
	for i := range buckets {
		if b := &buckets[i]; b.AtMost && b.Consistency == quota.Leased {
			if e := s.entry(b, now); e != nil {
				e.mu.Lock()
				e.deniedUntil = time.Time{}
				e.mu.Unlock()
			}
		}
	}
	return s.takeFixed(ctx, bs, buckets, res, g1)
}

// takeFixed takes bs, a copy of buckets whose AtMost buckets cost g, all
// or nothing, and reports g as their Granted when it charged.
func (s *Store) takeFixed(ctx context.Context, bs, buckets []quota.Bucket, res []quota.Result, g int64) (bool, error) {
	for i := range bs {
		if buckets[i].AtMost {
			bs[i].AtMost, bs[i].Cost = false, g
		}
	}
	ok, err := s.Take(ctx, bs, res)
	if err != nil || !ok {
		return ok, err
	}
	for i := range buckets {
		if buckets[i].AtMost {
			res[i].Granted = g
		}
	}
	return true, nil
}

// localAvail is how many units e's share holds here for b at now: a
// leased bucket's unspent, unexpired lease, an async bucket's tokens
// (a key new here: its full share, as reserveAsync assumes); -1 when
// this instance does not know (no lease; a changed limit, which resets
// the key). It changes nothing but an async share's refill.
func (e *entry) localAvail(b *quota.Bucket, now time.Time, n int) int64 {
	if e.limit != b.Limit || e.mode != b.Consistency {
		return -1
	}
	if b.Consistency == quota.Leased {
		if e.units > 0 && now.Before(e.expires) {
			return e.units
		}
		return -1
	}
	if !e.known {
		return max(0, int64(math.Floor(float64(e.capacity())/float64(n)-float64(e.u+e.inflight))))
	}
	e.refill(now, n)
	return max(0, int64(math.Floor(e.tok)))
}
