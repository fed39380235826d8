package redisstore

import (
	"context"

	"github.com/floodgate-go/floodgate/quota"
)

// spreadPartial reports whether a take on a cluster asks for a partial
// grant (quota.Bucket.AtMost) over buckets in more than one slot. One
// script decides a grant where every bucket is in one slot; spread over
// slots, takePartialSpread decides it in two steps.
func (s *Store) spreadPartial(buckets []quota.Bucket) bool {
	partial := false
	for i := range buckets {
		partial = partial || buckets[i].AtMost
	}
	if !partial { // every other take: no slot to compute here
		return false
	}
	first := s.slotOf(buckets[0].Key)
	for i := range buckets {
		if s.slotOf(buckets[i].Key) != first {
			return true
		}
	}
	return false
}

// takePartialSpread decides a partial grant over buckets in several
// cluster slots: it reads every bucket (a take that denies), takes the
// grant (the least of the AtMost buckets' Cost and remainings, at least 1
// unless the Cost is 0) as the cost of every AtMost bucket, and charges
// that all or nothing, as every multi-slot take does. Between the two
// round trips another client may spend what was read: the take then
// denies, it never charges more than a bucket has.
func (s *Store) takePartialSpread(ctx context.Context, buckets []quota.Bucket, res []quota.Result) (bool, error) {
	bs := append([]quota.Bucket(nil), buckets...)
	most := int64(0)
	for i := range bs {
		if bs[i].AtMost {
			most = bs[i].Cost
		}
		// The read: a cost above capacity denies every bucket, so the
		// take writes nothing (a take of cost 0 would rewrite the
		// states, as a charge) and reports each remaining as it stands.
		bs[i].AtMost, bs[i].Cost = false, bs[i].Limit.Capacity()+1
	}
	g := most
	if most > 0 {
		read := make([]quota.Result, len(bs))
		if _, err := s.takeCluster(ctx, bs, read); err != nil {
			return false, err
		}
		for i := range bs {
			if buckets[i].AtMost {
				g = min(g, read[i].Remaining)
			}
		}
		g = max(1, g)
	}
	for i := range bs {
		if buckets[i].AtMost {
			bs[i].Cost = g
		} else {
			bs[i].Cost = buckets[i].Cost
		}
	}
	allowed, err := s.takeCluster(ctx, bs, res)
	if err != nil {
		return false, err
	}
	if allowed {
		for i := range buckets {
			if buckets[i].AtMost {
				res[i].Granted = g
			}
		}
	}
	return allowed, nil
}
