package redisstore

import (
	"context"

	"github.com/floodgate-go/floodgate/quota"
)

// Refund gives each bucket's Cost units back, as if that many units charged
// earlier had never been taken, capped so a bucket never holds more than its
// capacity. It is what a caller that took units ahead calls to return
// those it did not spend (package tiers/localfirst gives back its leases
// with a negative Report, which is recorded): a settlement of
// the negated costs (settle.lua, on Redis TIME or the WithClock time), with the
// settlement arithmetic of the quota.Algorithm doc:
//
//	TokenBucket: tokens = min(B, tokens + (elapsed * N) / P), ts = now  (the refill, as a take does)
//	             tokens = min(B, tokens + c)
//	GCRA:        tat = max(t, tat - c * T)                               (t = now - quota.GCRAEpoch)
//
// so memstore's Refund gives the same state. A bucket whose key is absent
// is full already and is left alone, as is a bucket of cost 0. Round
// trips, slots and the denial cache are as for Settle.
//
// Only TokenBucket and GCRA can be refunded: a window algorithm's units
// belong to the window they were charged in, which Refund is not told, so
// a bucket of one is an error naming its algorithm. Bad input is refused
// with quota.ValidateTake's error (as if the buckets were a take). Either
// error is reported before any round trip.
func (s *Store) Refund(ctx context.Context, buckets []quota.Bucket) error {
	if err := quota.ValidateRefund(buckets); err != nil {
		return err
	}
	return s.adjust(ctx, buckets, -1)
}
