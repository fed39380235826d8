package memstore

import (
	"context"
	"hash/maphash"
	"math/bits"
	"time"

	"github.com/floodgate-go/floodgate/quota"
)

var _ quota.Reporter = (*Store)(nil)

// recKey names a report call.
type recKey struct{ instance, seq uint64 }

// record is what a Reporter remembers of a report call: applied, with
// what each bucket could not be charged (owed, in the call's order), or
// resolved as not applied; and when it is forgotten (µs).
type record struct {
	applied bool
	owed    []int64
	expires int64
}

// Report implements quota.Reporter: each token bucket or GCRA bucket is
// charged up to its Cost, as many units as it holds by the arithmetic of a
// take of that many (the floor of a token bucket's tokens, of a GCRA's
// remaining units; an absent bucket is full), or given -Cost back by
// Settle's arithmetic when Cost is negative; a window algorithm's bucket
// is charged its Cost in the window that holds its Admitted time while
// that window counts, nothing once it is over (quota.Reporter's
// arithmetic); each atomically with the takes of its key, at one
// reading of the clock; the call is recorded for quota.ReportRecordTTL. A
// call already recorded (resolved as not applied, or sent twice) is
// refused whole. Bad input is refused with quota.ValidateReport's error
// before anything is charged. ctx is not consulted.
func (s *Store) Report(_ context.Context, instance, seq uint64, buckets []quota.Bucket, res []quota.ReportResult) error {
	if err := quota.ValidateReport(instance, buckets, res); err != nil {
		return err
	}
	s.rmu.Lock()
	defer s.rmu.Unlock()
	now := s.records(s.clock.Now().UnixMicro())
	k := recKey{instance, seq}
	if _, ok := s.recs[k]; ok {
		clear(res[:len(buckets)])
		return nil
	}
	var owed []int64
	for i := range buckets {
		b := &buckets[i]
		var charged, remaining int64
		if b.Limit.Algorithm.CanBookAhead() {
			charged, remaining = s.chargeUpTo(b, b.Cost, now)
		} else {
			charged, remaining = s.chargeWindow(b, now)
		}
		res[i] = quota.ReportResult{Applied: true, Charged: charged, Remaining: remaining}
		if charged != b.Cost {
			if owed == nil {
				owed = make([]int64, len(buckets))
			}
			owed[i] = b.Cost - charged
		}
	}
	s.recs[k] = record{applied: true, owed: owed, expires: now + int64(quota.ReportRecordTTL/time.Microsecond)}
	return nil
}

// Resolve implements quota.Reporter: it says whether the call (instance,
// seq) was applied and what it charged of each bucket, from its record;
// a call with no record is recorded as resolved, not applied, so that it
// never will be. Bad input is refused with quota.ValidateReport's error.
// ctx is not consulted.
func (s *Store) Resolve(_ context.Context, instance, seq uint64, buckets []quota.Bucket, res []quota.ReportResult) error {
	if err := quota.ValidateReport(instance, buckets, res); err != nil {
		return err
	}
	s.rmu.Lock()
	defer s.rmu.Unlock()
	now := s.records(s.clock.Now().UnixMicro())
	k := recKey{instance, seq}
	r, ok := s.recs[k]
	if !ok {
		s.recs[k] = record{expires: now + int64(quota.ReportRecordTTL/time.Microsecond)}
	}
	for i := range buckets {
		res[i] = quota.ReportResult{}
		if r.applied {
			res[i] = quota.ReportResult{Applied: true, Charged: buckets[i].Cost}
			if r.owed != nil && i < len(r.owed) {
				res[i].Charged -= r.owed[i]
			}
		}
	}
	return nil
}

// records makes the record table ready at now (µs), sweeping expired
// records at most once per quota.ReportRecordTTL, and returns now;
// s.rmu is held.
func (s *Store) records(now int64) int64 {
	if s.recs == nil {
		s.recs = make(map[recKey]record)
	}
	if now-s.recsSwept >= int64(quota.ReportRecordTTL/time.Microsecond) {
		for k, r := range s.recs {
			if now >= r.expires {
				delete(s.recs, k)
			}
		}
		s.recsSwept = now
	}
	return now
}

// chargeUpTo charges b up to want units, as many as it holds at now (a
// negative want gives -want back, as Settle does), and returns the units
// charged and what the bucket has left.
func (s *Store) chargeUpTo(b *quota.Bucket, want int64, now int64) (charged, remaining int64) {
	h := maphash.String(s.seed, b.Key) & hashMask
	shi, _ := bits.Mul64(h, uint64(len(s.shards)))
	sh := &s.shards[shi]
	sh.mu.Lock()
	defer sh.mu.Unlock()
	p := pending{h: h, shard: uint32(shi), e: sh.t.get(h, b.Key)}
	p.fresh = p.e == nil || p.e.alg != b.Limit.Algorithm || now >= p.e.expires
	one := []quota.Bucket{*b}
	if want < 0 {
		if !p.fresh { // an absent bucket is full already
			one[0].Cost = want
			settle(p.e, &one[0], now, false)
		}
		one[0].Cost, one[0].MaxWait = 0, 0
		decide(&p, &one[0], now)
		return want, p.remNo
	}
	one[0].Cost, one[0].MaxWait = want, 0
	decide(&p, &one[0], now)
	left := p.remNo
	// Not all of it: what the bucket holds (one unit less if GCRA's
	// rounding says so).
	for !p.allow && one[0].Cost > 0 {
		one[0].Cost = min(one[0].Cost-1, left)
		decide(&p, &one[0], now)
	}
	if one[0].Cost <= 0 {
		return 0, left
	}
	s.commit(&p, &one[0], one, now)
	return one[0].Cost, p.remCh
}

// chargeWindow charges a window algorithm's bucket b its signed Cost in
// the window that holds b.Admitted, at now, by quota.Reporter's
// arithmetic, and returns the change of the count and what a take of
// cost 0 would report remaining after it.
func (s *Store) chargeWindow(b *quota.Bucket, now int64) (charged, remaining int64) {
	h := maphash.String(s.seed, b.Key) & hashMask
	shi, _ := bits.Mul64(h, uint64(len(s.shards)))
	sh := &s.shards[shi]
	sh.mu.Lock()
	defer sh.mu.Unlock()
	e := sh.t.get(h, b.Key)
	alg := b.Limit.Algorithm
	fresh := e == nil || e.alg != alg || now >= e.expires
	W, L, u := int64(b.Limit.Period/time.Microsecond), b.Limit.Rate, b.Cost
	a := min(b.Admitted.UnixMicro(), now)
	w := floorDiv(now, W)
	// state returns the entry to write, made fresh for alg if need be.
	state := func() *entry {
		if e == nil {
			e = s.insert(sh, h, b.Key, []quota.Bucket{*b}, now)
		}
		if fresh || e.alg != alg {
			e.alg, e.f, e.ts, e.win, e.curr, e.prev = alg, 0, 0, 0, 0, 0
			if e.log != nil {
				e.log.clear()
			}
			fresh = false
		}
		return e
	}
	switch alg {
	case quota.FixedWindow:
		end, z, counts := (w+1)*W, (w+1)*W, floorDiv(a, W) == w
		if sp := b.Span; !sp.IsZero() { // a calendar window: identified by its start
			w, z = sp.Start.UnixMicro(), sp.End.UnixMicro()
			end = max(z, now+1)
			counts = now < z && (fresh || e.win <= w)
		}
		var count int64
		if !fresh {
			count, _ = e.windowCount(now)
		}
		if counts && (u > 0 || count > 0) {
			next := max(0, count+u)
			charged, count = next-count, next
			e := state()
			e.win, e.curr, e.under = w, count, float64(z)
			e.expires = satAdd(end, ttlSlack)
		}
		return charged, max(0, L-count)
	case quota.SlidingWindowCounter:
		var curr, prev int64
		if !fresh {
			curr, prev, _ = e.counts(w, W, now)
		}
		wa := floorDiv(a, W)
		switch {
		case wa == w && (u > 0 || curr > 0):
			next := max(0, curr+u)
			charged, curr = next-curr, next
		case wa == w-1 && (u > 0 || prev > 0):
			next := max(0, prev+u)
			charged, prev = next-prev, next
		}
		if charged != 0 {
			e := state()
			e.win, e.curr, e.prev, e.under = w, curr, prev, float64(W)
			e.expires = satAdd((w+2)*W, ttlSlack)
		}
		el := now - w*W
		weighted := (float64(prev)*float64(W-el))/float64(W) + float64(curr)
		return charged, max(0, floorI(float64(L)-weighted))
	default: // quota.SlidingWindowLog
		var n int64
		if !fresh {
			e.log.dropThrough(now - W)
			n = e.log.total
		}
		if a > now-W && (u > 0 || n > 0) {
			e := state()
			if e.log == nil {
				e.log = new(ring)
			}
			if u > 0 {
				e.log.add(a, u)
				charged = u
			} else {
				charged = -e.log.dropNewestThrough(a, -u)
			}
			n = e.log.total
			if e.log.size == 0 {
				e.expires = satAdd(now, ttlSlack) // empty: nothing to keep
			} else {
				e.expires = satAdd(e.log.newest()+W, ttlSlack)
			}
		}
		return charged, max(0, L-n)
	}
}

// dropNewestThrough removes up to k units (k >= 0) recorded at or before
// t, the newest first, and returns how many it removed.
func (r *ring) dropNewestThrough(t, k int64) int64 {
	var removed int64
	for i := r.size - 1; i >= 0 && removed < k; i-- {
		s := r.at(i)
		if s.t > t {
			continue
		}
		d := min(s.n, k-removed)
		s.n -= d
		removed += d
	}
	if removed == 0 {
		return 0
	}
	r.total -= removed
	// Runs emptied in the middle are removed: rare, so the buffer is
	// rebuilt.
	nb := make([]stamp, 0, max(4, r.size))
	for i := 0; i < r.size; i++ {
		if s := *r.at(i); s.n > 0 {
			nb = append(nb, s)
		}
	}
	r.size = len(nb)
	r.buf, r.head = nb[:cap(nb)], 0
	return removed
}
