package memstore

import "math"

// A state records the limit it was written under (entry.under), so that a
// take under a changed limit keeps what its callers consumed: the
// quota.Algorithm doc, "Limit changes". Each function reads e's state as
// it stands under the limit in force, with the same operations, in the
// same order, as the Redis store's carry.lua. A state under another
// limit counts down at the pace of the limit it was written under until a
// take writes it under the new one (what was consumed before the change
// comes back on the old schedule, never sooner): so it reads as absent
// exactly when its own limit says, which its TTL follows, and a longer
// TTL never changes a decision.

// noEnd is the "left" of a window state that is absent: no cap.
const noEnd = math.MaxInt64

// tokens returns a token bucket's tokens at now under burst B and rate
// N/P (µs), refilled since the state was written and capped at the burst
// (absent: B), and r: 0 when the state was written under this limit (its
// times are then reckoned with N and P, as the Algorithm doc writes
// them), else the rate it was written under, in units per µs, at which
// it goes on refilling, to its own burst, its consumption carried to B.
func (e *entry) tokens(fresh bool, B, N, P float64, now int64) (tokens, r float64) {
	if fresh {
		return B, 0
	}
	return e.tokensAfter(max(0, now-e.ts), B, N, P)
}

// tokensAfter is tokens elapsed µs after the state was written.
func (e *entry) tokensAfter(elapsed int64, B, N, P float64) (tokens, r float64) {
	if e.under == B && e.rate == N/P {
		t := e.f + (float64(elapsed)*N)/P
		if t > B {
			t = B
		}
		return t, 0
	}
	// The explicit conversions forbid fused multiply-add, as in Lua.
	t := e.f + float64(float64(elapsed)*e.rate)
	if t > e.under {
		t = e.under
	}
	return t + (B - e.under), e.rate
}

// tat returns a GCRA bucket's TAT under emission interval T at tf (µs
// since quota.GCRAEpoch) (absent: tf), the TAT as stored, and tw: 0 when
// the state was written under T, else the interval it was written under,
// at which its units go on draining: the units it is ahead of tf, (tat -
// tf) / tw, counted at T each.
func (e *entry) tat(fresh bool, T, tf float64) (tat, stored, tw float64) {
	if fresh {
		return tf, tf, 0
	}
	if e.under == T || e.f <= tf {
		return e.f, e.f, 0
	}
	// The explicit conversions forbid fused multiply-add, as in Lua.
	return tf + float64(float64((e.f-tf)/e.under)*T), e.f, e.under
}

// windowCount returns what a fixed window's count counts at now: all of
// it while the window it was counted in (which ends at e.under) lasts,
// else nothing; and left, how long it lasts from now (µs; noEnd when it
// counts nothing).
func (e *entry) windowCount(now int64) (count, left int64) {
	if e.under > float64(now) {
		return e.curr, int64(e.under) - now
	}
	return 0, noEnd
}

// counts returns a sliding window counter's curr and prev at now, in
// window w of length W: as they stand when e was written under W (win ==
// w: both; win == w - 1: its curr is prev), else, until its curr's window
// and the next one are over, each count in the newest window of length W
// that its own window overlaps, or nowhere; and left, how long carried
// counts last from now (µs; noEnd under the window in force or absent).
func (e *entry) counts(w, W, now int64) (curr, prev, left int64) {
	if e.under == float64(W) {
		switch e.win {
		case w:
			return e.curr, e.prev, noEnd
		case w - 1:
			return 0, e.curr, noEnd
		}
		return 0, 0, noEnd
	}
	ww := int64(e.under)
	ce, ns := (e.win+1)*ww, w*W
	if now >= ce+ww {
		return 0, 0, noEnd
	}
	left = ce + ww - now
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
	return curr, prev, left
}
