package redisstore

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/floodgate-go/floodgate/quota"
	"github.com/redis/go-redis/v9"
)

// maxInlineBuckets is the number of buckets whose slots are grouped
// without allocating.
const maxInlineBuckets = 16

// takeCluster runs a take on a Redis Cluster: one script when every bucket
// is in one slot, else one per slot in parallel with refunds on a deny.
func (s *Store) takeCluster(ctx context.Context, buckets []quota.Bucket, res []quota.Result) (bool, error) {
	var inline [maxInlineBuckets]int
	slots := inline[:0]
	if len(buckets) > maxInlineBuckets {
		slots = make([]int, 0, len(buckets))
	}
	same := true
	for i := range buckets {
		sl := s.slotOf(buckets[i].Key)
		slots = append(slots, sl)
		if sl != slots[0] {
			same = false
		}
	}
	if same {
		return s.takeOne(ctx, buckets, slots[0], res)
	}
	return s.takeMulti(ctx, buckets, slots, res)
}

// slotOf returns the slot of the bucket's full key (prefix + key). The
// prefix has no braces, so this is the slot of the key's own hash tag
// whenever it has one.
func (s *Store) slotOf(key string) int {
	if t := hashTag(key); len(t) != len(key) {
		return int(crc16(t) & 16383)
	}
	// No tag: the whole prefixed key is hashed.
	return int(crc16s(s.prefix, key) & 16383)
}

// crc16s is crc16 of a + b without building the string.
func crc16s(a, b string) uint16 {
	var crc uint16
	for i := 0; i < len(a); i++ {
		crc = crc<<8 ^ crcTable[byte(crc>>8)^a[i]]
	}
	for i := 0; i < len(b); i++ {
		crc = crc<<8 ^ crcTable[byte(crc>>8)^b[i]]
	}
	return crc
}

// slotGroup is the buckets of one slot and what its take did.
type slotGroup struct {
	idx     []int
	c       *call
	charged bool
	now     int64
	err     error
}

func (s *Store) takeMulti(ctx context.Context, buckets []quota.Bucket, slots []int, res []quota.Result) (bool, error) {
	var groups []*slotGroup
	bySlot := make(map[int]*slotGroup, 4)
	for i, sl := range slots {
		g := bySlot[sl]
		if g == nil {
			g = &slotGroup{}
			bySlot[sl] = g
			groups = append(groups, g)
		}
		g.idx = append(g.idx, i)
	}
	for _, g := range groups {
		g.c = s.pool.Get().(*call)
	}
	defer func() {
		for _, g := range groups {
			s.release(g.c)
		}
	}()

	var wg sync.WaitGroup
	for _, g := range groups[1:] {
		wg.Add(1)
		go func(g *slotGroup) {
			defer wg.Done()
			g.charged, g.now, g.err = s.runTake(ctx, g.c, buckets, g.idx, res, true)
		}(g)
	}
	g0 := groups[0]
	g0.charged, g0.now, g0.err = s.runTake(ctx, g0.c, buckets, g0.idx, res, true)
	wg.Wait()

	all := true
	var errs []error
	for _, g := range groups {
		if g.err != nil {
			errs = append(errs, g.err)
		}
		if !g.charged {
			all = false
		}
	}
	if all && len(errs) == 0 {
		return true, nil
	}

	// Deny (or error): give back what the charging slots took, and report
	// their buckets as they stood before the charge, nothing booked.
	for i := range buckets {
		res[i].Wait = 0
	}
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), undoTimeout)
	defer cancel()
	var rwg sync.WaitGroup
	var mu sync.Mutex
	for _, g := range groups {
		if g.err != nil || !g.charged {
			continue
		}
		for j, i := range g.idx {
			res[i].Remaining = g.c.pre[2*j]
			res[i].Reset = usec(g.c.pre[2*j+1])
		}
		rwg.Add(1)
		go func(g *slotGroup) {
			defer rwg.Done()
			if err := s.refund(rctx, buckets, g.idx, g.c.states, g.now); err != nil {
				mu.Lock()
				errs = append(errs, fmt.Errorf("redisstore: refund of a denied multi-slot take failed, units stay charged until they expire: %w", err))
				mu.Unlock()
			}
		}(g)
	}
	rwg.Wait()
	return false, errors.Join(errs...)
}

// refund runs refund.lua for the buckets idx, charged at time t0, whose
// states before and after the charge are in states.
func (s *Store) refund(ctx context.Context, buckets []quota.Bucket, idx []int, states []string, t0 int64) error {
	c := s.pool.Get().(*call)
	defer s.release(c)
	c.buildRefund(refundScript, s.prefix, buckets, idx, states, t0, s.cluster != nil)
	_, err := runScript(ctx, s.client, c, refundScript, s.keyPos(), redis.NewCmd)
	return err
}
