package localfirst

// The pending entries (those that hold or owe something) are filed on a
// timing wheel by the tick at which Sync next needs them (their wake: a
// report due, a lease expiring), so that a Sync visits the entries due,
// not every entry held. A scan of every pending entry on every tick cost
// 0.8 ms and 800 KB of garbage a tick at 100 000 keys
// (BenchmarkSyncNothingDue), 8 % of a core at 100 ticks a second.
//
// An entry's wake only moves earlier between syncs (see entry.sooner);
// mark then moves the entry to an earlier slot when its tick changed, and
// leaves its old copy behind: a copy is live only while the entry's at
// names the copy's tick, so the stale one is dropped when its slot runs.
// Only a Sync moves a wake later, and it files the entries it took again
// by their wake at that moment.

// wheelSlots is how many ticks ahead the wheel files an entry: an entry
// whose wake is further is filed at the last slot and filed again from
// there.
const wheelSlots = 512

// Where an entry is filed (entry.at): a tick (≥ 1), or one of these.
const (
	atNone = 0  // not on the wheel: not pending, or taken by the Sync running
	atNow  = -1 // on the now list: due at the next Sync
)

// wheel is the pending entries by the tick Sync next needs them; guarded
// by Store.pmu.
type wheel struct {
	slots [wheelSlots][]*entry
	// now holds the entries due at the next Sync whatever its time: those
	// whose wake is before the first tick not yet run (overdue, or due
	// later within a tick already run).
	now []*entry
	cur int64 // the first tick not yet run (≥ 1)
	// filing, when set (tests only), runs in place between its read of
	// an entry's wake and its store of the tick: where a take's mark can
	// run unseen.
	filing func(*entry)
}

// tickOf is the tick holding the instant ns (Unix nanoseconds).
func tickOf(ns int64) int64 {
	if ns <= 0 {
		return 0
	}
	return ns / int64(tick)
}

// place files e, which is not on the wheel (at atNone), by its wake.
//
// A take moves the wake earlier under e.mu, which place does not hold
// (a Sync files the entries it kept after releasing them), and then
// reads at to see whether the entry needs filing earlier (Store.mark). If
// the take read at before place stored it, it saw atNone and left the
// entry to this Sync; so place reads the wake again after storing at,
// and files the entry earlier if it moved. Either the take sees the tick
// stored here, or place sees the take's wake: an entry is never left
// filed after its wake's tick.
func (w *wheel) place(e *entry) {
	for {
		t := tickOf(e.wake.Load())
		if w.filing != nil {
			w.filing(e)
		}
		if t < w.cur {
			e.at.Store(atNow)
			w.now = append(w.now, e)
			return
		}
		t = min(t, w.cur+wheelSlots-1)
		e.at.Store(t)
		i := t % wheelSlots
		w.slots[i] = append(w.slots[i], e)
		if tickOf(e.wake.Load()) >= t {
			return
		}
		// Moved earlier meanwhile: file it again (the copy left at t is
		// dropped when its slot runs, as at no longer names t).
	}
}

// advance files e again if its wake moved before the tick it is filed
// at. An entry a Sync has taken (atNone) is left to it.
func (w *wheel) advance(e *entry) {
	at := e.at.Load()
	if at == atNone || at == atNow {
		return
	}
	if t := tickOf(e.wake.Load()); t < at {
		w.place(e)
	}
}

// take appends to out the entries filed up to tick upTo (every entry, if
// all), marks them taken (atNone) and empties their slots; the wheel then
// starts at upTo+1.
func (w *wheel) take(upTo int64, all bool, out []*entry) []*entry {
	for _, e := range w.now {
		if e.at.Load() == atNow {
			e.at.Store(atNone)
			out = append(out, e)
		}
	}
	w.now = drain(w.now)
	n := int64(wheelSlots)
	if !all {
		n = min(n, upTo-w.cur+1)
	}
	for t := w.cur; t < w.cur+n; t++ {
		i := t % wheelSlots
		for _, e := range w.slots[i] {
			if e.at.Load() == t {
				e.at.Store(atNone)
				out = append(out, e)
			}
		}
		w.slots[i] = drain(w.slots[i])
	}
	w.cur = max(w.cur, upTo+1)
	return out
}

// drain empties l for reuse, keeping its array unless it is mostly
// unused (a burst of keys is not held for ever).
func drain(l []*entry) []*entry {
	if cap(l) > 1024 && len(l) < cap(l)/4 {
		return nil
	}
	clear(l)
	return l[:0]
}
