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

// Report implements quota.Reporter: each bucket is charged up to its Cost,
// as many units as it holds by the arithmetic of a take of that many (the
// floor of a token bucket's tokens, of a GCRA's remaining units; an absent
// bucket is full), or given -Cost back by Settle's arithmetic when Cost is
// negative, each atomically with the takes of its key, at one
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
		charged, remaining := s.chargeUpTo(b, b.Cost, now)
		res[i] = quota.ReportResult{Applied: true, Charged: charged, Remaining: remaining}
		if charged < b.Cost {
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
