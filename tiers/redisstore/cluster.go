package redisstore

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"time"

	"github.com/floodgate-go/floodgate/quota"
	"github.com/redis/go-redis/v9"
)

// maxInlineBuckets is the number of buckets whose slots are grouped
// without allocating.
const maxInlineBuckets = 16

// inlineSlots is the number of slots of a multi-slot take whose parts
// and refunds are kept without allocating. It is small on purpose: these
// arrays live on the caller's stack (a gRPC handler's goroutine starts
// with 8 KiB), and frames of kilobytes made the runtime grow and copy
// that stack on every take (runtime.newstack was a tenth of the client's
// CPU in grpcload's cluster row with 16).
const inlineSlots = 4

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

// multiTake is a multi-slot take's working state, pooled rather than
// kept in the take's stack frames: a gRPC handler's goroutine starts with
// a small stack, and these arrays as locals made the runtime grow and
// copy the whole stack on every multi-slot take (runtime.newstack was a
// ninth of grpcload's cluster row's CPU).
type multiTake struct {
	groups [inlineSlots]slotGroup
	idx    [inlineSlots][maxInlineBuckets]int // the first groups' idx
	cs     [inlineSlots]*call
	out    [inlineSlots]answer
}

var multiPool = sync.Pool{New: func() any { return new(multiTake) }}

// release clears what m refers to and returns it to the pool.
func (m *multiTake) release() {
	m.groups = [inlineSlots]slotGroup{}
	m.cs = [inlineSlots]*call{}
	m.out = [inlineSlots]answer{}
	multiPool.Put(m)
}

// slotGroup is the buckets of one slot and what its take did.
type slotGroup struct {
	slot    int
	idx     []int
	c       *call
	charged bool
	now     int64
	err     error
}

// takeMulti runs a take whose buckets span several slots: one take.lua
// call in mode "p" per slot, all at once (through the batcher, which
// sends them in its next pipelines with every other caller's calls, else
// in parallel goroutines), then, if any slot denied or failed, one
// refund.lua call per slot that charged, again all at once (see
// refundGroups). A batched take whose caller gives up after its parts
// were queued is finished all the same (see answerLateMulti).
func (s *Store) takeMulti(ctx context.Context, buckets []quota.Bucket, slots []int, res []quota.Result) (bool, error) {
	m := multiPool.Get().(*multiTake)
	groups := m.groups[:0]
	for i, sl := range slots {
		k := 0
		for k < len(groups) && groups[k].slot != sl {
			k++
		}
		if k == len(groups) {
			g := slotGroup{slot: sl}
			if k < inlineSlots {
				g.idx = m.idx[k][:0]
			}
			groups = append(groups, g)
		}
		groups[k].idx = append(groups[k].idx, i)
	}
	for k := range groups {
		groups[k].c = s.pool.Get().(*call)
	}
	defer func() {
		for k := range groups {
			if c := groups[k].c; c != nil { // nil: handed to answerLateMulti
				s.release(c)
			}
		}
		m.release()
	}()

	if s.batch != nil {
		if err := s.takeParts(ctx, m, groups, buckets, res); err != nil {
			return false, err
		}
	} else {
		var wg sync.WaitGroup
		for k := 1; k < len(groups); k++ {
			wg.Add(1)
			go func(g *slotGroup) {
				defer wg.Done()
				g.charged, g.now, g.err = s.runTake(ctx, g.c, buckets, g.idx, res, true)
			}(&groups[k])
		}
		g0 := &groups[0]
		g0.charged, g0.now, g0.err = s.runTake(ctx, g0.c, buckets, g0.idx, res, true)
		wg.Wait()
	}
	return s.settleParts(ctx, groups, buckets, res)
}

// settleParts decides a multi-slot take from what its parts did: allowed
// when every slot charged, else denied, and what the charging slots
// charged is given back (see refundGroups).
func (s *Store) settleParts(ctx context.Context, groups []slotGroup, buckets []quota.Bucket, res []quota.Result) (bool, error) {
	all := true
	var errs []error
	for k := range groups {
		g := &groups[k]
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
	errs = append(errs, s.refundGroups(ctx, groups, buckets, res)...)
	return false, errors.Join(errs...)
}

// takeParts sends the part of every slot group through the batcher, all
// queued at once, and writes their results. If ctx ends while a part that
// was queued is unanswered, the take is finished in the background (see
// answerLateMulti) and takeParts returns ctx's error.
func (s *Store) takeParts(ctx context.Context, m *multiTake, groups []slotGroup, buckets []quota.Bucket, res []quota.Result) error {
	cs, out := m.cs[:0], m.out[:0]
	for k := range groups {
		g := &groups[k]
		s.buildTake(g.c, buckets, g.idx, true)
		g.c.slot = g.slot
		cs, out = append(cs, g.c), append(out, answer{})
	}
	s.batch.doAll(ctx, cs, out)
	runtime.KeepAlive(s)
	for k := range groups {
		if groups[k].c.sent != nil {
			return s.answerLateMulti(ctx, groups, buckets, out)
		}
	}
	decodeParts(groups, out, buckets, res)
	return nil
}

// decodeParts writes the results of the slot groups' answers (out, in
// group order) and what each group's part did.
func decodeParts(groups []slotGroup, out []answer, buckets []quota.Bucket, res []quota.Result) {
	for k := range groups {
		g := &groups[k]
		if g.err = out[k].err; g.err == nil {
			g.now = out[k].now
			g.charged, g.err = decodeTake(out[k].seg, g.c.n, buckets, g.idx, res, true, g.c)
		}
	}
}

// refundGroups gives back what the charging slot groups of a denied (or
// failed) multi-slot take charged, and reports their buckets as they
// stood before the charge, nothing booked. The refunds go at once,
// through the batcher when it is on, within undoTimeout even when ctx has
// ended. A refund that fails (or whose reply is lost) is handed to the
// store's retrier, which sends it again in the background until it
// applies or its units would have come back anyway (see retrier); its
// error is returned, saying so.
func (s *Store) refundGroups(ctx context.Context, groups []slotGroup, buckets []quota.Bucket, res []quota.Result) []error {
	for i := range buckets {
		res[i].Wait = 0
	}
	var (
		inlineJ [inlineSlots]refundJob
		inlineC [inlineSlots]*call
		inlineA [inlineSlots]answer
	)
	jobs, cs, out := inlineJ[:0], inlineC[:0], inlineA[:0]
	for k := range groups {
		g := &groups[k]
		if g.err != nil || !g.charged {
			continue
		}
		j := s.newRefundJob(buckets, g, res)
		j.group = k
		for jj, i := range g.idx {
			res[i].Remaining = g.c.pre[2*jj]
			res[i].Reset = usec(g.c.pre[2*jj+1])
		}
		c := s.pool.Get().(*call)
		j.build(c, s, buckets, g)
		jobs, cs, out = append(jobs, j), append(cs, c), append(out, answer{})
	}
	if len(cs) == 0 {
		return nil
	}
	defer func() {
		for _, c := range cs {
			s.release(c)
		}
	}()
	if s.beforeRefund != nil {
		s.beforeRefund()
	}
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), undoTimeout)
	defer cancel()
	if s.batch != nil {
		s.batch.doAll(rctx, cs, out)
		runtime.KeepAlive(s)
	} else {
		var wg sync.WaitGroup
		for k, c := range cs {
			wg.Add(1)
			go func() {
				defer wg.Done()
				_, out[k].err = runScript(rctx, s.client, c, refundScript, s.keyPos(), redis.NewIntCmd)
			}()
		}
		wg.Wait()
	}
	var errs []error
	for k := range cs {
		err := out[k].err
		if err == nil {
			continue
		}
		j := &jobs[k]
		if j.marker == "" {
			errs = append(errs, fmt.Errorf("redisstore: refund of a denied multi-slot take failed, units stay charged until they expire (no retry: key %q gives no refund marker in its slot): %w", buckets[j.first].Key, err))
			continue
		}
		// A fresh call: the batcher may still hold the one that failed.
		j.c = new(call)
		j.build(j.c, s, buckets, &groups[j.group])
		s.retry.add(*j)
		errs = append(errs, fmt.Errorf("redisstore: refund of a denied multi-slot take failed; it is retried in the background until it applies or its units would have come back anyway, by %s: %w", j.deadline.UTC().Format(time.RFC3339Nano), err))
	}
	return errs
}
