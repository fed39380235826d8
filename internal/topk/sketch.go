package topk

import (
	"bytes"
	"hash/maphash"
)

// MaxPrincipal is the longest principal kept, in bytes. A longer one is
// kept as its first MaxPrincipal-33 bytes, '#' and 32 hex digits of the
// SHA-256 of the whole (see Summary.Record), so distinct long principals
// stay distinct.
const MaxPrincipal = 96

// entry is one counter of a sketch: a principal, the count the sketch
// holds for it and the error of that count (the count of the principal it
// replaced, which the count may overstate by).
type entry struct {
	count, err uint64
	hash       uint64
	pos        int32 // index in sketch.heap
	n          uint8 // len of p used
	p          [MaxPrincipal]byte
}

func (e *entry) principal() []byte { return e.p[:e.n] }

// sketch is one Space-Saving summary (Metwally, Agrawal, El Abbadi 2005)
// of capacity k: k counters, a min-heap of them by count, and an
// open-addressing table from a principal's hash to its counter. Every
// slice is allocated at newSketch; add allocates nothing.
type sketch struct {
	epoch int64  // the slice of time it counts (Summary's epochs)
	total uint64 // records counted, exactly
	n     int    // counters in use
	ent   []entry
	heap  []int32 // counter indexes, a min-heap by count
	table []int32 // counter index + 1; 0 is an empty slot
	mask  uint64
}

func newSketch(k int) *sketch {
	size := 1
	for size < 2*k {
		size <<= 1
	}
	return &sketch{
		ent:   make([]entry, k),
		heap:  make([]int32, 0, k),
		table: make([]int32, size),
		mask:  uint64(size - 1),
	}
}

// reset empties s for epoch e, keeping its memory.
func (s *sketch) reset(e int64) {
	s.epoch, s.total, s.n = e, 0, 0
	s.heap = s.heap[:0]
	clear(s.table)
}

// min is the smallest count when every counter is in use, else 0: the
// most that a principal s does not track can have been counted in s.
func (s *sketch) min() uint64 {
	if s.n < len(s.ent) || s.n == 0 {
		return 0
	}
	return s.ent[s.heap[0]].count
}

// add counts one record of p (at most MaxPrincipal bytes, hashed h).
func (s *sketch) add(p []byte, h uint64) {
	s.total++
	if i, ok := s.find(p, h); ok {
		e := &s.ent[i]
		e.count++
		s.down(int(e.pos))
		return
	}
	if s.n < len(s.ent) {
		i := int32(s.n)
		s.n++
		e := &s.ent[i]
		e.count, e.err, e.hash = 1, 0, h
		e.n = uint8(copy(e.p[:], p))
		e.pos = int32(len(s.heap))
		s.heap = append(s.heap, i)
		s.insert(i)
		s.up(int(e.pos))
		return
	}
	// Space-Saving: the least counted principal gives its counter to p,
	// whose count starts at the replaced count plus one, the replaced
	// count being its error.
	i := s.heap[0]
	e := &s.ent[i]
	s.remove(i)
	e.err = e.count
	e.count++
	e.hash = h
	e.n = uint8(copy(e.p[:], p))
	s.insert(i)
	s.down(0)
}

// find returns the counter of p.
func (s *sketch) find(p []byte, h uint64) (int32, bool) {
	for j := h & s.mask; ; j = (j + 1) & s.mask {
		v := s.table[j]
		if v == 0 {
			return 0, false
		}
		if e := &s.ent[v-1]; e.hash == h && bytes.Equal(e.principal(), p) {
			return v - 1, true
		}
	}
}

// insert puts counter i in the table, under its hash.
func (s *sketch) insert(i int32) {
	j := s.ent[i].hash & s.mask
	for s.table[j] != 0 {
		j = (j + 1) & s.mask
	}
	s.table[j] = i + 1
}

// remove takes counter i out of the table, shifting back the entries
// after it that probed past its slot (linear probing without tombstones,
// so the table never fills with them).
func (s *sketch) remove(i int32) {
	j := s.ent[i].hash & s.mask
	for s.table[j] != i+1 {
		j = (j + 1) & s.mask
	}
	for k := (j + 1) & s.mask; s.table[k] != 0; k = (k + 1) & s.mask {
		home := s.ent[s.table[k]-1].hash & s.mask
		// The entry at k may move to the hole at j unless its home slot
		// lies cyclically in (j, k].
		if (k-home)&s.mask >= (k-j)&s.mask {
			s.table[j] = s.table[k]
			j = k
		}
	}
	s.table[j] = 0
}

func (s *sketch) less(a, b int) bool {
	return s.ent[s.heap[a]].count < s.ent[s.heap[b]].count
}

func (s *sketch) swap(a, b int) {
	s.heap[a], s.heap[b] = s.heap[b], s.heap[a]
	s.ent[s.heap[a]].pos = int32(a)
	s.ent[s.heap[b]].pos = int32(b)
}

func (s *sketch) up(i int) {
	for i > 0 {
		p := (i - 1) / 2
		if !s.less(i, p) {
			return
		}
		s.swap(i, p)
		i = p
	}
}

func (s *sketch) down(i int) {
	n := len(s.heap)
	for {
		l := 2*i + 1
		if l >= n {
			return
		}
		c := l
		if r := l + 1; r < n && s.less(r, l) {
			c = r
		}
		if !s.less(c, i) {
			return
		}
		s.swap(i, c)
		i = c
	}
}

// hashOf is the table's hash of p.
func hashOf(seed maphash.Seed, p []byte) uint64 { return maphash.Bytes(seed, p) }
