package memstore

import (
	"context"
	"hash/maphash"
	"math/bits"
	"time"

	"github.com/floodgate-go/floodgate/quota"
)

var _ quota.Settler = (*Store)(nil)

// Settle implements quota.Settler: it adds each bucket's signed Cost to
// what the bucket has been charged, with the arithmetic of the
// quota.Algorithm doc ("Settlement"): a token bucket or GCRA may go into
// debt, a window's count never below 0, an absent bucket is full (a refund
// leaves it absent, a charge starts it from full). Every bucket is
// adjusted under the same shard locks as a take, at one reading of the
// clock, so no take sees a settlement half applied. took is not
// consulted: this store charged every bucket itself. Bad input is refused
// with quota.ValidateSettle's error before anything changes. ctx is not
// consulted.
func (s *Store) Settle(_ context.Context, buckets []quota.Bucket, took []quota.Result) error {
	if err := quota.ValidateSettle(buckets, took); err != nil {
		return err
	}
	n := len(buckets)
	if n == 0 {
		return nil
	}
	var (
		hbuf [stackBuckets]uint64
		sbuf [stackBuckets]uint32
		lbuf [stackBuckets]uint32
		hs   []uint64
		shs  []uint32
		lock []uint32
	)
	if n <= stackBuckets {
		hs, shs, lock = hbuf[:n], sbuf[:n], lbuf[:0]
	} else {
		hs, shs, lock = make([]uint64, n), make([]uint32, n), make([]uint32, 0, n)
	}
	nsh := uint64(len(s.shards))
	for i := range buckets {
		if buckets[i].Cost == 0 {
			continue
		}
		h := maphash.String(s.seed, buckets[i].Key) & hashMask
		sh, _ := bits.Mul64(h, nsh)
		hs[i], shs[i] = h, uint32(sh)
		lock = insertSorted(lock, uint32(sh))
	}
	for _, i := range lock {
		s.shards[i].mu.Lock()
	}
	now := s.clock.Now().UnixMicro()
	for i := range buckets {
		b := &buckets[i]
		if b.Cost == 0 {
			continue
		}
		sh := &s.shards[shs[i]]
		e := sh.t.get(hs[i], b.Key)
		fresh := e == nil || e.alg != b.Limit.Algorithm || now >= e.expires
		if fresh && b.Cost < 0 {
			continue // absent: a missing bucket is full
		}
		if e == nil {
			e = s.insert(sh, hs[i], b.Key, buckets, now)
		}
		if fresh {
			e.alg, e.f, e.ts, e.win, e.curr, e.prev = b.Limit.Algorithm, 0, 0, 0, 0, 0
			if e.log != nil {
				e.log.clear()
			}
		}
		settle(e, b, now, fresh)
	}
	for k := len(lock) - 1; k >= 0; k-- {
		s.shards[lock[k]].mu.Unlock()
	}
	return nil
}

// settle adds b's signed cost to its state e at now (see Settle); fresh
// says the state is absent (e has been wiped for b's algorithm), which
// happens only for a charge.
func settle(e *entry, b *quota.Bucket, now int64, fresh bool) {
	lim := b.Limit
	per := int64(lim.Period / time.Microsecond)
	d := b.Cost
	B, N, P, df := float64(lim.Burst), float64(lim.Rate), float64(per), float64(d)
	var expires int64
	switch lim.Algorithm {
	case quota.TokenBucket:
		tokens, _ := e.tokens(fresh, B, N, P, now)
		tokens = tokens - df
		if tokens > B {
			tokens = B
		}
		reset := ceilI(((B - tokens) * P) / N)
		e.f, e.ts, e.under, e.rate = tokens, now, B, N/P
		expires = satAdd(now, max(reset, minTTL))
	case quota.GCRA:
		T := P / N
		tf := float64(now - quota.GCRAEpoch)
		tat, _, _ := e.tat(fresh, T, tf)
		if d > 0 {
			if tf > tat {
				tat = tf
			}
			tat = tat + float64(df*T) // no fused multiply-add, as in Lua
		} else {
			tat = tat + float64(df*T)
			if tat < tf {
				tat = tf
			}
		}
		e.f, e.under = tat, T
		expires = satAdd(now, max(ceilI(tat-tf), minTTL))
	case quota.FixedWindow:
		W := per
		w := floorDiv(now, W)
		var count int64
		if !fresh {
			count, _ = e.windowCount(now)
		}
		if d < 0 && count == 0 {
			return // nothing counted in this window to give back
		}
		e.win, e.curr, e.under = w, max(0, count+d), float64((w+1)*W)
		expires = (w + 1) * W
	case quota.SlidingWindowCounter:
		W := per
		w := floorDiv(now, W)
		var curr, prev int64
		if !fresh {
			curr, prev, _ = e.counts(w, W, now)
		}
		if d < 0 && curr == 0 {
			return // nothing counted in this window to give back
		}
		e.win, e.curr, e.prev, e.under = w, max(0, curr+d), prev, float64(W)
		expires = (w + 2) * W
	case quota.SlidingWindowLog:
		if e.log == nil {
			e.log = new(ring)
		}
		if !fresh {
			e.log.dropThrough(now - per)
		}
		if d > 0 {
			e.log.add(now, d)
		} else {
			e.log.dropNewest(-d)
		}
		if e.log.size == 0 {
			expires = now // empty: nothing to keep
		} else {
			expires = e.log.newest() + per
		}
	}
	e.expires = satAdd(expires, ttlSlack)
}

// dropNewest removes the k newest units (k >= 0).
func (r *ring) dropNewest(k int64) {
	for k > 0 && r.size > 0 {
		last := r.at(r.size - 1)
		if last.n > k {
			last.n -= k
			r.total -= k
			return
		}
		k -= last.n
		r.total -= last.n
		r.size--
	}
}
