package redisstore

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"sync"

	"github.com/redis/go-redis/v9"

	"github.com/floodgate-go/floodgate/tiers"
)

//go:embed credit.lua
var creditSrc string

var creditScript = newScript(creditSrc)

// Refund gives each bucket's Cost units back, as if that many units charged
// earlier had never been taken, capped so a bucket never holds more than its
// capacity. It is what a caller that took units ahead (a lease, package
// tiers/localfirst) calls to return those it did not spend. It runs
// credit.lua, on Redis TIME (or the WithClock time, like Take), with the
// arithmetic of the tiers.Algorithm doc:
//
//	TokenBucket: tokens = min(B, tokens + (elapsed * N) / P), ts = now  (the refill, as a take does)
//	             tokens = min(B, tokens + c)
//	GCRA:        tat = max(t, tat - c * T)                               (t = now - tiers.GCRAEpoch)
//
// so memstore's Refund gives the same state. A bucket whose key is absent
// is full already and is left alone, as is a bucket of cost 0. Keys keep
// their TTL: the refunded state is full no later than the charged one
// would have been.
//
// Round trips: one script call (EVALSHA, NOSCRIPT answered by EVAL as for
// Take) for all the buckets on a standalone or Sentinel-managed Redis and
// for buckets that share a cluster slot; buckets in several slots are
// refunded per slot, in parallel, each slot atomically, and an error of
// any slot is the Refund's error (the others may have been refunded). A
// refunded bucket's cached denial (WithDenialCache) is dropped.
//
// Only TokenBucket and GCRA can be refunded: a window algorithm's units
// belong to the window they were charged in, which Refund is not told, so
// a bucket of one is an error naming its algorithm. Bad input is refused
// with tiers.ValidateTake's error (as if the buckets were a take). Either
// error is reported before any round trip.
func (s *Store) Refund(ctx context.Context, buckets []tiers.Bucket) error {
	if err := tiers.ValidateRefund(buckets); err != nil {
		return err
	}
	var inline [maxInlineBuckets]int
	idx := inline[:0]
	if len(buckets) > maxInlineBuckets {
		idx = make([]int, 0, len(buckets))
	}
	for i := range buckets {
		if buckets[i].Cost > 0 {
			idx = append(idx, i)
		}
	}
	if len(idx) == 0 {
		return nil
	}
	if s.cache != nil {
		defer s.cache.forget(buckets)
	}
	// One reading of the store's clock for every slot.
	var now int64
	fixed := s.clock != nil
	if fixed {
		now = s.clock.Now().UnixMicro()
	}
	if s.cluster == nil {
		return s.credit(ctx, buckets, idx, now, fixed)
	}
	sl0 := s.slotOf(buckets[idx[0]].Key)
	same := true
	for _, i := range idx[1:] {
		if s.slotOf(buckets[i].Key) != sl0 {
			same = false
			break
		}
	}
	if same {
		return s.credit(ctx, buckets, idx, now, fixed)
	}
	return s.creditSlots(ctx, buckets, idx, now, fixed)
}

// creditSlots refunds buckets whose keys span cluster slots: one
// credit.lua call per slot, in parallel.
func (s *Store) creditSlots(ctx context.Context, buckets []tiers.Bucket, idx []int, now int64, fixed bool) error {
	var groups [][]int
	bySlot := make(map[int]int, 4)
	for _, i := range idx {
		sl := s.slotOf(buckets[i].Key)
		g, ok := bySlot[sl]
		if !ok {
			g = len(groups)
			bySlot[sl] = g
			groups = append(groups, nil)
		}
		groups[g] = append(groups[g], i)
	}
	errs := make([]error, len(groups))
	var wg sync.WaitGroup
	for g := range groups {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[g] = s.credit(ctx, buckets, groups[g], now, fixed)
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// credit runs credit.lua once over the buckets idx (all in one slot).
func (s *Store) credit(ctx context.Context, buckets []tiers.Bucket, idx []int, now int64, fixed bool) error {
	c := s.pool.Get().(*call)
	defer s.release(c)
	c.now, c.fixed = now, fixed
	c.buildCredit(creditScript, s.prefix, buckets, idx, s.cluster != nil)
	if _, err := runScript(ctx, s.client, c, creditScript, s.keyPos(), redis.NewIntCmd); err != nil {
		return fmt.Errorf("redisstore: Refund: %w", err)
	}
	return nil
}
