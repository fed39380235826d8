package memstore

// A state records the limit it was written under (entry.under), so that a
// take under a changed limit keeps what its callers consumed: the
// quota.Algorithm doc, "Limit changes". Each function reads e's state as
// it stands under the limit in force, with the same operations, in the
// same order, as the Redis store's carry.lua.

// tokens returns a token bucket's tokens and ts under burst B at now: its
// consumption, Bw - tokens, carried to B; from the moment it refilled to
// its own burst at its own rate (e.full) on, the bucket is absent: B, now.
func (e *entry) tokens(B float64, now int64) (float64, int64) {
	if now >= e.full {
		return B, now
	}
	t := e.f
	if e.under != B {
		t = t + (B - e.under)
	}
	return t, e.ts
}

// tat returns a GCRA bucket's TAT under emission interval T at tf (µs
// since quota.GCRAEpoch): the units it is ahead of tf, (tat - tf) / Tw,
// at T each.
func (e *entry) tat(T, tf float64) float64 {
	tat := e.f
	if e.under != T && tat > tf {
		// The explicit conversions forbid fused multiply-add, as in Lua.
		tat = tf + float64(float64((tat-tf)/e.under)*T)
	}
	return tat
}

// windowCount returns what a fixed window's count counts at now: all of
// it while the window it was counted in (which ends at e.under) lasts,
// else nothing.
func (e *entry) windowCount(now int64) int64 {
	if e.under > float64(now) {
		return e.curr
	}
	return 0
}

// counts returns a sliding window counter's curr and prev at now, in
// window w of length W: as they stand when e was written under W (win ==
// w: both; win == w - 1: its curr is prev), else, until its curr's window
// and the next one are over, each count in the newest window of length W
// that its own window overlaps, or nowhere.
func (e *entry) counts(w, W, now int64) (curr, prev int64) {
	if e.under == float64(W) {
		switch e.win {
		case w:
			return e.curr, e.prev
		case w - 1:
			return 0, e.curr
		}
		return 0, 0
	}
	ww := int64(e.under)
	ce, ns := (e.win+1)*ww, w*W
	if now >= ce+ww {
		return 0, 0
	}
	switch {
	case ce > ns:
		curr = e.curr
	case ce > ns-W:
		prev = e.curr
	}
	switch ce -= ww; {
	case ce > ns:
		curr += e.prev
	case ce > ns-W:
		prev += e.prev
	}
	return curr, prev
}
