package otel

import (
	"strings"
	"sync"
	"sync/atomic"
)

// otherValue is the attribute value that stands for every value beyond an
// interner's cap, so that a misconfigured or hostile input can never grow
// the number of metric series without bound.
const otherValue = "_other"

// interner maps the strings that become metric attribute values to small
// indexes, admitting at most max distinct values; every later value maps to
// index 0, which stands for otherValue. Lookups of known values take no lock
// and allocate nothing: the map is copied on write and published
// atomically. Because the number of values is capped, so is the cost of the
// copies.
type interner struct {
	max   int
	mu    sync.Mutex // serialises add
	idx   atomic.Pointer[map[string]uint16]
	names atomic.Pointer[[]string] // index -> value; names[0] == otherValue
	full  atomic.Bool
}

// newInterner returns an interner that admits max distinct values beyond
// the seed values, which are admitted first and never count against max.
func newInterner(max int, seed ...string) *interner {
	in := &interner{max: max + len(seed)}
	m := make(map[string]uint16, len(seed))
	names := make([]string, 1, len(seed)+1)
	names[0] = otherValue
	for _, s := range seed {
		if _, ok := m[s]; ok {
			continue
		}
		m[s] = uint16(len(names))
		names = append(names, s)
	}
	in.idx.Store(&m)
	in.names.Store(&names)
	return in
}

// lookup returns the index of s, admitting s if there is room.
func (in *interner) lookup(s string) uint16 {
	if i, ok := (*in.idx.Load())[s]; ok {
		return i
	}
	if in.full.Load() {
		return 0
	}
	return in.add(s)
}

func (in *interner) add(s string) uint16 {
	in.mu.Lock()
	defer in.mu.Unlock()
	old := *in.idx.Load()
	if i, ok := old[s]; ok {
		return i
	}
	if len(old) >= in.max {
		in.full.Store(true)
		return 0
	}
	names := *in.names.Load()
	i := uint16(len(names))
	s = strings.Clone(s) // never retain the caller's (request's) memory
	m := make(map[string]uint16, len(old)+1)
	for k, v := range old {
		m[k] = v
	}
	m[s] = i
	grown := make([]string, len(names), len(names)+1)
	copy(grown, names)
	grown = append(grown, s)
	in.names.Store(&grown)
	in.idx.Store(&m)
	return i
}

// name returns the value behind index i.
func (in *interner) name(i uint16) string {
	names := *in.names.Load()
	if int(i) < len(names) {
		return names[i]
	}
	return otherValue
}

// cowMap is a map read without locks and written by copying, for caches
// whose key space is bounded (here: by the interners' caps).
type cowMap[K comparable, V any] struct {
	mu sync.Mutex
	m  atomic.Pointer[map[K]V]
}

func (c *cowMap[K, V]) load(k K) (V, bool) {
	p := c.m.Load()
	if p == nil {
		var zero V
		return zero, false
	}
	v, ok := (*p)[k]
	return v, ok
}

// loadOrStore returns the value at k, storing build() there first if absent.
func (c *cowMap[K, V]) loadOrStore(k K, build func() V) V {
	c.mu.Lock()
	defer c.mu.Unlock()
	var old map[K]V
	if p := c.m.Load(); p != nil {
		old = *p
		if v, ok := old[k]; ok {
			return v
		}
	}
	v := build()
	m := make(map[K]V, len(old)+1)
	for kk, vv := range old {
		m[kk] = vv
	}
	m[k] = v
	c.m.Store(&m)
	return v
}

// len reports the number of entries.
func (c *cowMap[K, V]) len() int {
	p := c.m.Load()
	if p == nil {
		return 0
	}
	return len(*p)
}
