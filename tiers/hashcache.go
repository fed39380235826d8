package tiers

import (
	"hash/maphash"
	"math/rand/v2"
)

// API keys are always hashed into bucket keys, and SHA-256 is the largest
// single cost of building a request's keys. hashCache remembers the hex
// digests of recently seen API keys so a returning caller skips it.
//
// The cache is bounded: hashCacheSlots entries, each holding a copy of an
// API key of at most maxCachedKey bytes (longer keys are never cached), so
// it holds at most about 0.5 MB however many distinct keys clients send.
// It is safe for concurrent use without locks: entries are immutable once
// published and slots are swapped atomically. A lookup costs one seeded
// maphash and the loads of two adjacent slots (an entry is read only when
// its slot's hash matches). A miss hashes as before and publishes a new
// entry in one of the key's two candidate slots (if both are taken, only
// one miss in evictOneIn evicts).
//
// A lookup compares the seeded 64-bit hash before the bytes, so the time a
// lookup takes says nothing about how much of another caller's key a
// guess shares.
const (
	hashCacheSlots = 4096 // a power of two
	maxCachedKey   = 64
	// evictOneIn: a miss whose two slots are both taken replaces one of
	// them with probability 1/evictOneIn.
	evictOneIn = 8
)

type hashEntry struct {
	h   uint64
	n   uint8
	hex [2 * hashBytes]byte
	key [maxCachedKey]byte
}

type hashCache struct {
	seed  maphash.Seed
	slots [hashCacheSlots]cacheSlot[hashEntry]
}

// apiKeyHashes is shared by every Limiter: the digest of a key does not
// depend on the policy or the key prefix.
var apiKeyHashes = &hashCache{seed: maphash.MakeSeed()}

// lookup appends the cached hex digest of s to b. It reports false, with b
// unchanged, when s is not cached.
func (c *hashCache) lookup(b []byte, s string) (h uint64, _ []byte, ok bool) {
	if len(s) > maxCachedKey {
		return 0, b, false
	}
	h = maphash.String(c.seed, s)
	i := h & (hashCacheSlots - 1)
	if e := c.slots[i].load(h); e != nil && e.h == h && string(e.key[:e.n]) == s {
		return h, append(b, e.hex[:]...), true
	}
	if e := c.slots[i^1].load(h); e != nil && e.h == h && string(e.key[:e.n]) == s {
		return h, append(b, e.hex[:]...), true
	}
	return h, b, false
}

// store remembers hex as the digest of s, whose maphash is h (as returned
// by lookup). Keys longer than maxCachedKey are not cached.
func (c *hashCache) store(h uint64, s string, hex []byte) {
	if len(s) > maxCachedKey || len(hex) != 2*hashBytes {
		return
	}
	i := h & (hashCacheSlots - 1)
	if c.slots[i].taken() {
		i ^= 1
		if c.slots[i].taken() {
			// Both candidate slots are taken: replace one only now and
			// then, so a stream of one-off keys neither allocates on every
			// request nor flushes the keys that keep coming back.
			r := rand.Uint64()
			if r%evictOneIn != 0 {
				return
			}
			i ^= r >> 63
		}
	}
	e := &hashEntry{h: h, n: uint8(len(s))}
	copy(e.key[:], s)
	copy(e.hex[:], hex)
	c.slots[i].store(h, e)
}
