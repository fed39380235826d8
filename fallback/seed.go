package fallback

import (
	"hash/maphash"
	"sync/atomic"
	"time"

	"github.com/floodgate-go/floodgate/quota"
)

// lastKnown remembers, per bucket key, the remaining units the primary last
// reported and when: what a local limiter starts from when the primary
// stops answering, so one slow call does not hand out a fresh full bucket.
// It is a direct-mapped table of atomics: recording costs a hash and two
// stores, never an allocation or a lock; a collision overwrites (the other
// key then starts from a full local share, as without a record). The two
// words of a slot are not written as one: a reader racing a writer of
// another key in the same slot can take that key's value. Either way the
// damage is one local limiter seeded wrong within its own share.
type lastKnown struct {
	seed  maphash.Seed
	base  time.Time
	mask  uint64
	slots []seedSlot
}

type seedSlot struct {
	h atomic.Uint64 // key hash | 1 (0 = empty)
	v atomic.Uint64 // remaining << 34 | milliseconds since base
}

const (
	seedTimeBits = 34
	seedTimeMask = 1<<seedTimeBits - 1
	seedMaxRem   = 1<<(64-seedTimeBits) - 1
)

func newLastKnown(size int, base time.Time) *lastKnown {
	n := 1
	for n < size {
		n <<= 1
	}
	return &lastKnown{seed: maphash.MakeSeed(), base: base, mask: uint64(n - 1), slots: make([]seedSlot, n)}
}

// record notes the primary's answer for the FailLocal buckets of a take,
// the only ones a local limiter is ever made for.
func (l *lastKnown) record(buckets []quota.Bucket, res []quota.Result, now time.Time) {
	ms := uint64(max(0, now.Sub(l.base).Milliseconds())) & seedTimeMask // base and now read the same clock
	for i := range buckets {
		if buckets[i].OnStoreError != quota.FailLocal {
			continue
		}
		h := maphash.String(l.seed, buckets[i].Key) | 1
		rem := uint64(max(0, min(res[i].Remaining, seedMaxRem)))
		s := &l.slots[h&l.mask]
		s.v.Store(rem<<seedTimeBits | ms)
		s.h.Store(h)
	}
}

// lookup returns the remaining units last reported for key and when,
// seen at now. The time is kept in seedTimeBits of milliseconds, which
// wrap every 2^34 ms (199 days): it is read as the latest instant not
// after now with those bits (a record is taken for less than 199 days
// old; one older is long refilled anyway).
func (l *lastKnown) lookup(key string, now time.Time) (remaining int64, at time.Time, ok bool) {
	h := maphash.String(l.seed, key) | 1
	s := &l.slots[h&l.mask]
	if s.h.Load() != h {
		return 0, time.Time{}, false
	}
	v := s.v.Load()
	if s.h.Load() != h {
		return 0, time.Time{}, false
	}
	nowMs := uint64(max(0, now.Sub(l.base).Milliseconds()))
	age := (nowMs - v&seedTimeMask) & seedTimeMask
	return int64(v >> seedTimeBits), l.base.Add(time.Duration(int64(nowMs)-int64(age)) * time.Millisecond), true
}

// recordOne notes that the primary said key had remaining units at now
// (a report's reply).
func (l *lastKnown) recordOne(key string, remaining int64, now time.Time) {
	ms := uint64(max(0, now.Sub(l.base).Milliseconds())) & seedTimeMask
	h := maphash.String(l.seed, key) | 1
	rem := uint64(max(0, min(remaining, seedMaxRem)))
	sl := &l.slots[h&l.mask]
	sl.v.Store(rem<<seedTimeBits | ms)
	sl.h.Store(h)
}
