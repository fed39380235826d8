package memstore

// table is a shard's index: open addressing with linear probing over
// (hash, entry) slots, at most half full, deleting by backward shift (no
// tombstones). The hash is computed once per bucket per Take (it also
// picks the shard, from its high bits; the table uses its low bits), and
// keys are compared in full, so two keys with the same hash stay two
// buckets. A rotating hand gives sweeps and evictions their sample: each
// continues where the last one stopped, so over time every entry is
// examined.
type table struct {
	slots []slot // length a power of two, or nil before the first put
	used  int
	hand  int
}

type slot struct {
	h uint64
	e *entry // nil: empty
}

const minSlots = 8

func (t *table) get(h uint64, key string) *entry {
	if t.slots == nil {
		return nil
	}
	mask := uint64(len(t.slots) - 1)
	for i := h & mask; ; i = (i + 1) & mask {
		s := &t.slots[i]
		if s.e == nil {
			return nil
		}
		if s.h == h && s.e.key == key {
			return s.e
		}
	}
}

// home returns the entry and hash in h's home slot: the answer to get
// when that entry's key matches, which is the common case.
func (t *table) home(h uint64) (*entry, uint64) {
	if t.slots == nil {
		return nil, 0
	}
	s := t.slots[h&uint64(len(t.slots)-1)]
	return s.e, s.h
}

// put adds e, which must not be present.
func (t *table) put(e *entry) {
	if 2*(t.used+1) > len(t.slots) {
		t.grow()
	}
	t.place(slot{e.h, e})
	t.used++
}

func (t *table) place(s slot) {
	mask := uint64(len(t.slots) - 1)
	i := s.h & mask
	for t.slots[i].e != nil {
		i = (i + 1) & mask
	}
	t.slots[i] = s
}

func (t *table) grow() {
	old := t.slots
	t.slots = make([]slot, max(minSlots, 2*len(old)))
	for _, s := range old {
		if s.e != nil {
			t.place(s)
		}
	}
	t.hand = 0
}

// removeAt empties slot i and shifts back the entries after it that would
// otherwise become unreachable.
func (t *table) removeAt(i int) {
	mask := len(t.slots) - 1
	for j := (i + 1) & mask; t.slots[j].e != nil; j = (j + 1) & mask {
		home := int(t.slots[j].h) & mask
		// Slot j may move to the hole at i unless its home lies
		// cyclically in (i, j].
		if i <= j {
			if i < home && home <= j {
				continue
			}
		} else if i < home || home <= j {
			continue
		}
		t.slots[i] = t.slots[j]
		i = j
	}
	t.slots[i] = slot{}
	t.used--
}

// remove deletes e, which must be present.
func (t *table) remove(e *entry) {
	mask := uint64(len(t.slots) - 1)
	for i := e.h & mask; ; i = (i + 1) & mask {
		if t.slots[i].e == e {
			t.removeAt(int(i))
			return
		}
	}
}

// scan calls f on up to n entries from the hand onwards, deleting those
// for which f returns true, and leaves the hand after the last slot
// examined. Within one lap each entry is examined once, except that a
// deletion near the end of a full lap may shift an entry examined at the
// start back into view; f must tolerate seeing an entry twice.
func (t *table) scan(n int, f func(*entry) bool) {
	if t.used == 0 {
		return
	}
	mask := len(t.slots) - 1
	i := t.hand & mask
	// A deletion shifts later entries back into slot i, so i is examined
	// again without moving on; steps bounds the walk to one lap.
	for steps, seen := 0, 0; steps < len(t.slots) && seen < n && t.used > 0; {
		e := t.slots[i].e
		if e == nil {
			i = (i + 1) & mask
			steps++
			continue
		}
		seen++
		if f(e) {
			t.removeAt(i)
			continue
		}
		i = (i + 1) & mask
		steps++
	}
	t.hand = i
}
