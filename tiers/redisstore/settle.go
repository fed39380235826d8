package redisstore

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"runtime"
	"strings"

	"github.com/floodgate-go/floodgate/quota"
	"github.com/redis/go-redis/v9"
)

//go:embed settle.lua
var settleSrc string

// stateSrc starts settle.lua and report.lua, after log.lua: the call's
// time and the writing of a string state with its TTL, which the two
// share.
//
//go:embed state.lua
var stateSrc string

var settleScript = newScript(logSrc, stateSrc, settleSrc)

var _ quota.Settler = (*Store)(nil)

// Settle implements quota.Settler: it adds each bucket's signed Cost to
// what the bucket has been charged, by settle.lua, with the arithmetic of
// the quota.Algorithm doc ("Settlement"), so that memstore's Settle gives
// the same state: token bucket and GCRA may go into debt, a window's count
// never below 0, an absent key is a full bucket (a refund leaves it
// absent). Time is Redis TIME, or the WithClock time, as for Take; keys get
// the TTL a take writing that state would give them.
//
// Round trips: one script call (EVALSHA, NOSCRIPT answered by EVAL as for
// Take) for every bucket on a standalone or Sentinel-managed Redis and for
// buckets that share a cluster slot; buckets in several slots are settled
// per slot, each slot atomically. With batching on (the default) the calls
// join the flushers' pipelines with every other caller's calls, as takes
// do (BenchmarkSettle: 2.2–2.4x the settlements per second of round trips
// of their own, at a quarter of the client's CPU and half of Redis's);
// with it off, a Settle's calls go in one pipeline, one round trip per
// master. A settlement is never retried: a call that failed or timed out
// may or may not have been applied in its slot (never twice), and its
// error is the Settle's error (the other slots may have been settled). A refunded bucket's cached
// denial (WithDenialCache) is dropped. took is not consulted: this store
// charged every bucket itself. Bad input is refused with
// quota.ValidateSettle's error before any round trip.
func (s *Store) Settle(ctx context.Context, buckets []quota.Bucket, took []quota.Result) error {
	if err := quota.ValidateSettle(buckets, took); err != nil {
		return err
	}
	var inline [maxInlineBuckets]int
	idx := inline[:0]
	if len(buckets) > maxInlineBuckets {
		idx = make([]int, 0, len(buckets))
	}
	refund := false
	for i := range buckets {
		if c := buckets[i].Cost; c != 0 {
			idx = append(idx, i)
			refund = refund || c < 0
		}
	}
	if len(idx) == 0 {
		return nil
	}
	if s.cache != nil && refund {
		defer s.cache.liftDenials(buckets)
	}
	// One reading of the store's clock for every slot.
	var now int64
	fixed := s.clock != nil
	if fixed {
		now = s.clock.Now().UnixMicro()
	}
	if s.cluster != nil {
		sl0 := s.slotOf(buckets[idx[0]].Key)
		for _, i := range idx[1:] {
			if s.slotOf(buckets[i].Key) != sl0 {
				return s.settleSlots(ctx, buckets, idx, now, fixed)
			}
		}
	}
	return s.settle(ctx, buckets, idx, now, fixed)
}

// settleSlots settles buckets whose keys span cluster slots: one
// settle.lua call per slot, all at once: through the batcher when it is
// on, else in one pipeline (see runScripts).
func (s *Store) settleSlots(ctx context.Context, buckets []quota.Bucket, idx []int, now int64, fixed bool) error {
	groups := s.bySlot(buckets, idx)
	cs := make([]*call, len(groups))
	for g, gi := range groups {
		c := s.pool.Get().(*call)
		c.now, c.fixed = now, fixed
		c.buildSettle(settleScript, s.prefix, buckets, gi, s.minArg, true)
		c.kind = kindSettle
		cs[g] = c
	}
	var errs []error
	if s.batch != nil {
		out := make([]answer, len(cs))
		s.batch.doAll(ctx, cs, out)
		runtime.KeepAlive(s)
		errs = make([]error, len(cs))
		for g := range out {
			errs[g] = out[g].err
		}
	} else {
		_, errs = runScripts(ctx, s.client, cs, s.keyPos(), redis.NewIntCmd)
	}
	for g, c := range cs {
		if errs[g] != nil {
			errs[g] = settleError(errs[g])
		}
		s.release(c)
	}
	return errors.Join(errs...)
}

// settleError is the error of a settle.lua call that failed: err, as the
// batcher gives it ("redisstore: " and the cause) or as Redis did.
func settleError(err error) error {
	if !strings.HasPrefix(err.Error(), "redisstore: ") {
		err = fmt.Errorf("redisstore: %w", err)
	}
	return fmt.Errorf("%w (Settle: not retried; it may or may not have been applied)", err)
}

// bySlot splits the buckets idx by cluster slot, each group in idx's
// order, the groups in the order of their first bucket.
func (s *Store) bySlot(buckets []quota.Bucket, idx []int) [][]int {
	var groups [][]int
	group := make(map[int]int, 4)
	for _, i := range idx {
		sl := s.slotOf(buckets[i].Key)
		g, ok := group[sl]
		if !ok {
			g = len(groups)
			group[sl] = g
			groups = append(groups, nil)
		}
		groups[g] = append(groups[g], i)
	}
	return groups
}

// settle runs settle.lua once over the buckets idx (all in one slot):
// through the batcher when it is on, which sends it in its next pipeline
// with every other caller's calls, else as its own round trip.
func (s *Store) settle(ctx context.Context, buckets []quota.Bucket, idx []int, now int64, fixed bool) error {
	c := s.pool.Get().(*call)
	defer s.release(c)
	c.now, c.fixed = now, fixed
	c.buildSettle(settleScript, s.prefix, buckets, idx, s.minArg, s.cluster != nil)
	c.kind = kindSettle
	var err error
	if s.batch != nil {
		_, _, err = s.batch.do(ctx, c)
		// s must not be collected (which stops the batcher) while the
		// call waits there.
		runtime.KeepAlive(s)
	} else {
		_, err = runScript(ctx, s.client, c, settleScript, s.keyPos(), redis.NewIntCmd)
	}
	if err != nil {
		return settleError(err)
	}
	return nil
}

// buildSettle lays out a settle.lua call:
//
//	EVALSHA sha numkeys key... now minttl limits
//
// over the buckets named by idx, at c.now if c.fixed (else now is "":
// Redis TIME), limits packed as take.lua's, each cost the signed
// adjustment. With cluster, the first key is also passed as a plain string
// so the cluster client can route by it.
func (c *call) buildSettle(sc script, prefix string, buckets []quota.Bucket, idx []int, minArg []byte, cluster bool) {
	n := len(idx)
	c.n = n
	c.putInt(int64(n))
	for _, i := range idx {
		c.putKey(prefix, buckets[i].Key)
	}
	if c.fixed {
		c.putInt(c.now)
	}
	c.put(func(b []byte) []byte { return append(b, minArg...) })
	start := len(c.arena)
	c.arena = appendF64(c.arena, int64(n))
	for _, i := range idx {
		c.arena = appendLimit(c.arena, &buckets[i])
	}
	c.offs = append(c.offs, start, len(c.arena))
	c.finish()
	c.args = append(c.args, "evalsha", sc.shaArg)
	for k := 0; k <= n; k++ {
		c.args = append(c.args, &c.bufs[k])
	}
	if cluster {
		c.args[3] = string(c.bufs[1].b)
	}
	k := n + 1
	if c.fixed {
		c.args = append(c.args, &c.bufs[k])
		k++
	} else {
		c.args = append(c.args, "")
	}
	c.args = append(c.args, &c.bufs[k], &c.bufs[k+1])
}

// liftDenials drops the cached denials of the buckets a settlement or
// a report gives units back to (Cost < 0).
func (d *denialCache) liftDenials(buckets []quota.Bucket) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.gen.Add(1) // takes under way keep the denials they bring back out
	for i := range buckets {
		if b := &buckets[i]; b.CacheDenials && b.Cost < 0 {
			delete(d.m, cacheKey{key: b.Key, lim: b.Limit})
		}
	}
}
