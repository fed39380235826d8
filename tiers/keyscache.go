package tiers

import (
	"hash/maphash"
	"math/rand/v2"
	"sync/atomic"
)

// Every Admit that matches a keyed rule needs its keys as one immutable
// string the store may keep: converting the built bytes allocates. A
// caller sending many requests builds the same bytes every time, so
// keysCache remembers recent key strings and hands the same string back.
//
// Like hashCache it is bounded (keysCacheSlots entries of at most
// maxCachedKeys bytes; longer key sets are never cached), lock-free
// (immutable entries published atomically), and two-way: each byte string
// has two candidate slots, and a miss finding both taken replaces one
// only with probability 1/evictOneIn, so one-off callers neither allocate
// an entry per request nor flush the callers that keep coming back. What
// it keeps, bucket keys, is built from escaped or hashed identity
// components (API keys are never stored raw).
const (
	keysCacheSlots = 1024 // a power of two
	maxCachedKeys  = 512
)

type keysEntry struct {
	h    uint64
	keys string
}

type keysCache struct {
	seed  maphash.Seed
	slots [keysCacheSlots]cacheSlot[keysEntry]
}

// cacheSlot holds an entry and a copy of its hash, so a miss is decided
// from the slot array alone, without loading the entry. The two are
// published separately; a reader that sees a hash without its entry (or
// the reverse) only misses, since the entry's own hash and key are
// checked too.
type cacheSlot[E any] struct {
	h atomic.Uint64
	e atomic.Pointer[E]
}

func (s *cacheSlot[E]) load(h uint64) *E {
	if s.h.Load() != h {
		return nil
	}
	return s.e.Load()
}

func (s *cacheSlot[E]) taken() bool { return s.e.Load() != nil }

func (s *cacheSlot[E]) store(h uint64, e *E) {
	s.e.Store(e)
	s.h.Store(h)
}

// recentKeys is shared by every Limiter: equal bytes make equal strings
// whatever the policy.
var recentKeys = &keysCache{seed: maphash.MakeSeed()}

// get returns b as a string, the cached one when b was seen recently.
func (c *keysCache) get(b []byte) string {
	if len(b) > maxCachedKeys {
		return string(b)
	}
	h := maphash.Bytes(c.seed, b)
	i := h & (keysCacheSlots - 1)
	if e := c.slots[i].load(h); e != nil && e.h == h && e.keys == string(b) {
		return e.keys
	}
	if e := c.slots[i^1].load(h); e != nil && e.h == h && e.keys == string(b) {
		return e.keys
	}
	s := string(b)
	if c.slots[i].taken() {
		i ^= 1
		if c.slots[i].taken() {
			r := rand.Uint64()
			if r%evictOneIn != 0 {
				return s
			}
			i ^= r >> 63
		}
	}
	c.slots[i].store(h, &keysEntry{h: h, keys: s})
	return s
}
