package history

import (
	"fmt"
	"hash/maphash"
	"maps"
	"math"
	"slices"

	"github.com/floodgate-go/floodgate/quota"
)

// eps is the tolerance, in tokens, of the token bucket's comparisons: the
// store computes in IEEE doubles in its own order, the model in another.
const eps = 1e-6

// keyState is the set of states a bucket may be in.
type keyState struct {
	// set is false for a bucket never charged (full, or count 0).
	set bool
	// lo, hi (token bucket): the interval of the bucket's zero time z, in
	// µs since the model's base: it holds min(B, (t - z)·N/P) tokens at
	// time t. -Inf is full at any time.
	lo, hi float64
	// win, clo, chi (fixed window): the window number and the interval of
	// its count.
	win      int64
	clo, chi int64
}

// pending is the takes of unknown outcome on one key: when each was sent
// (µs, ascending) and the prefix sums of their costs.
type pending struct {
	sent []int64
	sum  []int64 // sum[i]: the cost of the first i
}

// between returns the cost of the takes sent in [from, to].
func (p *pending) between(from, to int64) int64 {
	if p == nil {
		return 0
	}
	i, _ := slices.BinarySearch(p.sent, from)
	j, found := slices.BinarySearch(p.sent, to)
	for found && j < len(p.sent) && p.sent[j] == to {
		j++
	}
	if j <= i {
		return 0
	}
	return p.sum[j] - p.sum[i]
}

// model is the sequential model over every bucket, with the undo log the
// search needs.
type model struct {
	base  int64 // µs: token bucket times are kept relative to it
	skew  int64 // µs of tolerance around an interval
	keys  map[string]keyState
	tclk  int64 // the time of the last placed take (µs): times never go back
	cut   int64 // µs: unknown takes sent before it no longer count (a restart)
	hash  uint64
	seed  maphash.Seed
	pend  map[string]*pending
	ops   []Op
	reset []Reset
	orig  []int // each op's index in the whole history, when a part (see split)
	// stage holds one take's new bucket states before they are committed.
	stage []keyState
	// whyKey is the bucket an explained failure is about.
	whyKey string
}

// undo is what one placed take changed.
type undo struct {
	keys       []string
	old        []keyState
	had        []bool
	snap       map[string]keyState // a reset: every bucket
	tclk, cut  int64
	hash       uint64
	choice, op int
}

func (m *model) keyHash(k string, st keyState) uint64 {
	return maphash.Comparable(m.seed, struct {
		k  string
		st keyState
	}{k, st})
}

// stateKey is the hash of the whole state, for the search's memo.
func (m *model) stateKey() uint64 {
	return m.hash ^ maphash.Comparable(m.seed, [2]int64{m.tclk, m.cut})
}

func floorDiv(a, b int64) int64 {
	q := a / b
	if (a%b != 0) && ((a < 0) != (b < 0)) {
		q--
	}
	return q
}

// interval returns the times (µs) at which op i may have run: its Redis
// time, or its [sent, answered] widened by the skew; a reset's interval
// for indexes past the takes.
func (m *model) interval(i int) (int64, int64) {
	if i >= len(m.ops) {
		r := m.reset[i-len(m.ops)]
		return floorDiv(r.From, 1000) - m.skew, -floorDiv(-r.To, 1000) + m.skew
	}
	o := &m.ops[i]
	if o.Now != 0 {
		return o.Now, o.Now
	}
	return floorDiv(o.Sent, 1000) - m.skew, -floorDiv(-o.Answered, 1000) + m.skew
}

// choices splits [t1, t2] at the window boundaries of op's fixed-window
// buckets, so that in each part every bucket has one window; at most 16
// parts (beyond, the last part spans the rest and is counted in the
// windows of its start: a take without Redis time spanning more than 16
// windows is not modelled soundly; a take with its Redis time has one
// part).
func (m *model) choices(o *Op, t1, t2 int64) [][2]int64 {
	var cuts []int64
	for _, b := range o.Buckets {
		if b.Limit.Algorithm != quota.FixedWindow {
			continue
		}
		W := b.Limit.Period.Microseconds()
		for k := floorDiv(t1, W) + 1; k*W <= t2 && len(cuts) < 64; k++ {
			cuts = append(cuts, k*W)
		}
	}
	slices.Sort(cuts)
	cuts = slices.Compact(cuts)
	parts := [][2]int64{}
	a := t1
	for _, c := range cuts {
		if len(parts) == 15 {
			break
		}
		parts = append(parts, [2]int64{a, c - 1})
		a = c
	}
	return append(parts, [2]int64{a, t2})
}

// apply places op i with the given choice of its time interval's part. It
// reports whether the take's answer is possible from the current state
// (then the state is the one after it, and u undoes it) and how many
// choices there are; with explain, a failure says why.
func (m *model) apply(i, choice int, explain bool) (ok bool, n int, u undo, why string) {
	t1, t2 := m.interval(i)
	if t1 < m.tclk {
		t1 = m.tclk
	}
	if t1 > t2 {
		if explain {
			why = fmt.Sprintf("it ran by %s, before a take already placed at %s (Redis time does not go back)", stamp(t2*1000), stamp(m.tclk*1000))
		}
		return false, 1, u, why
	}
	u = undo{tclk: m.tclk, cut: m.cut, hash: m.hash, choice: choice, op: i}
	if i >= len(m.ops) { // a restart or a failover
		if choice > 0 {
			return false, 1, u, ""
		}
		u.snap = m.keys
		m.tclk = t1
		if r := &m.reset[i-len(m.ops)]; len(r.Keys) > 0 {
			m.keys = maps.Clone(m.keys)
			for _, k := range r.Keys {
				st, ok := m.keys[k]
				if !ok || !st.set {
					continue
				}
				m.hash ^= m.keyHash(k, st)
				st.lo, st.clo = math.Inf(-1), 0 // any charge may be lost: up to full
				m.keys[k] = st
				m.hash ^= m.keyHash(k, st)
			}
			return true, 1, u, ""
		}
		m.keys = make(map[string]keyState)
		m.hash = 0
		m.cut = floorDiv(m.reset[i-len(m.ops)].From, 1000)
		return true, 1, u, ""
	}
	o := &m.ops[i]
	parts := m.choices(o, t1, t2)
	if choice >= len(parts) {
		return false, len(parts), u, ""
	}
	a, b := parts[choice][0], parts[choice][1]
	m.stage = m.stage[:0]
	denied := false
	for j := range o.Buckets {
		bk := &o.Buckets[j]
		st := m.keys[bk.Key]
		d := m.pend[bk.Key].between(m.cut, b)
		var ns keyState
		var w string
		switch {
		case o.Report && bk.Limit.Algorithm == quota.TokenBucket:
			ns, w = m.reportCharge(st, bk, !o.Resolved, a, b, d)
		case bk.Limit.Algorithm == quota.TokenBucket:
			ns, w = m.tokenBucket(st, bk, o.Outcome, a, b, d, explain)
		case bk.Limit.Algorithm == quota.FixedWindow:
			ns, w = fixedWindow(st, bk, o.Outcome, a, d, explain)
		default:
			w = "unsupported algorithm " + bk.Limit.Algorithm.String()
		}
		if w != "" {
			if explain {
				why = fmt.Sprintf("bucket %s: %s (state before: %s)", bk.Key, w, m.describe(bk, st, a))
				m.whyKey = bk.Key
			}
			return false, len(parts), u, why
		}
		if !bk.Allowed {
			denied = true
		}
		m.stage = append(m.stage, ns)
	}
	if o.Outcome == Denied && !denied {
		if explain {
			why = "denied, but every bucket reported allowed"
		}
		return false, len(parts), u, why
	}
	for j := range o.Buckets {
		k := o.Buckets[j].Key
		old, had := m.keys[k]
		u.keys, u.old, u.had = append(u.keys, k), append(u.old, old), append(u.had, had)
		if had {
			m.hash ^= m.keyHash(k, old)
		}
		m.keys[k] = m.stage[j]
		m.hash ^= m.keyHash(k, m.stage[j])
	}
	m.tclk = a
	return true, len(parts), u, ""
}

// revert undoes a placed take.
func (m *model) revert(u *undo) {
	if u.snap != nil {
		m.keys = u.snap
	} else {
		for j := len(u.keys) - 1; j >= 0; j-- {
			if u.had[j] {
				m.keys[u.keys[j]] = u.old[j]
			} else {
				delete(m.keys, u.keys[j])
			}
		}
	}
	m.tclk, m.cut, m.hash = u.tclk, u.cut, u.hash
}

// tokenBucket steps one token bucket run at a time in [t1, t2] (µs) with
// up to d units of unknown takes possibly applied before; it returns the
// new state or why the answer is impossible.
func (m *model) tokenBucket(st keyState, bk *Bucket, out Outcome, t1, t2, d int64, explain bool) (keyState, string) {
	r := float64(bk.Limit.Rate) / float64(bk.Limit.Period.Microseconds())
	B, c := float64(bk.Limit.Burst), float64(bk.Cost)
	e := eps / r
	f1, f2 := float64(t1-m.base), float64(t2-m.base)
	zl, zh := math.Inf(-1), math.Inf(-1)
	if st.set {
		zl, zh = st.lo, st.hi
	}
	if d > 0 {
		zh = math.Max(zh, f2-B/r) + float64(d)/r
	}
	never := c > B
	allowedHere := out == Allowed || bk.Allowed
	if out == Allowed && !bk.Allowed {
		return st, "the take allowed but this bucket reported a deny"
	}
	if allowedHere {
		if never {
			return st, fmt.Sprintf("allowed a cost of %d above the capacity %d", bk.Cost, bk.Limit.Burst)
		}
		zh = math.Min(zh, f2-c/r+e)
	} else if !never {
		zl = math.Max(zl, f1-c/r-e)
	}
	if out == Denied && !never {
		rem := float64(bk.Remaining)
		if rem > B+eps {
			return st, fmt.Sprintf("remaining %d above the burst", bk.Remaining)
		}
		zh = math.Min(zh, f2-rem/r+e)
		if B >= rem+1+eps {
			zl = math.Max(zl, f1-(rem+1)/r-e)
		}
	}
	if zl > zh {
		if !explain {
			return st, "x"
		}
		return st, m.tbWhy(bk, out, allowedHere, t1, t2, r)
	}
	if out == Denied {
		return keyState{set: true, lo: zl, hi: zh}, ""
	}
	nl := math.Max(zl, f1-B/r) + c/r
	nh := math.Max(zh, f2-B/r) + c/r
	rem := float64(bk.Remaining)
	nh = math.Min(nh, f2-rem/r+e)
	nl = math.Max(nl, f1-(rem+1)/r-e)
	if nl > nh {
		if !explain {
			return st, "x"
		}
		return st, fmt.Sprintf("after charging %d it holds %s tokens, but the store reported remaining %d", bk.Cost, m.tokens(bk, keyState{set: true, lo: math.Max(zl, f1-B/r) + c/r, hi: math.Max(zh, f2-B/r) + c/r}, t1), bk.Remaining)
	}
	return keyState{set: true, lo: nl, hi: nh}, ""
}

// reportCharge steps one token bucket through a report call's charge of
// bk.Cost units (negative: given back, up to the capacity) at some time in
// [t1, t2] (µs), with up to d units of unknown takes possibly applied
// before; with remaining, bk.Remaining is what it held after. A report
// never denies: it charges what the bucket holds, so a positive charge
// says the bucket held at least that many units.
func (m *model) reportCharge(st keyState, bk *Bucket, remaining bool, t1, t2, d int64) (keyState, string) {
	r := float64(bk.Limit.Rate) / float64(bk.Limit.Period.Microseconds())
	B, c := float64(bk.Limit.Burst), float64(bk.Cost)
	e := eps / r
	f1, f2 := float64(t1-m.base), float64(t2-m.base)
	zl, zh := math.Inf(-1), math.Inf(-1)
	if st.set {
		zl, zh = st.lo, st.hi
	}
	if d > 0 {
		zh = math.Max(zh, f2-B/r) + float64(d)/r
	}
	if c > 0 {
		zh = math.Min(zh, f2-c/r+e)
		if zl > zh {
			return st, fmt.Sprintf("a report charged %d units, more than the model's tokens", bk.Cost)
		}
	}
	// The charge, then the cap at the capacity (a give-back fills at most
	// to full): z' = max(max(z, t−B/r) + c/r, t−B/r).
	nl := math.Max(math.Max(zl, f1-B/r)+c/r, f1-B/r)
	nh := math.Max(math.Max(zh, f2-B/r)+c/r, f2-B/r)
	if remaining {
		rem := float64(bk.Remaining)
		nh = math.Min(nh, f2-rem/r+e)
		nl = math.Max(nl, f1-(rem+1)/r-e)
		if nl > nh {
			return st, fmt.Sprintf("after a report of %d units it holds %s tokens, but the store reported remaining %d",
				bk.Cost, m.tokens(bk, keyState{set: true, lo: math.Max(math.Max(zl, f1-B/r)+c/r, f1-B/r), hi: math.Max(math.Max(zh, f2-B/r)+c/r, f2-B/r)}, t1), bk.Remaining)
		}
	}
	return keyState{set: true, lo: nl, hi: nh}, ""
}

func (m *model) tbWhy(bk *Bucket, out Outcome, allowedHere bool, t1, t2 int64, r float64) string {
	switch {
	case allowedHere && out == Allowed:
		return fmt.Sprintf("allowed cost %d, but the model has fewer tokens (remaining %d reported after)", bk.Cost, bk.Remaining)
	case allowedHere:
		return fmt.Sprintf("reported allow (remaining %d) in a denied take, which the model's tokens do not explain", bk.Remaining)
	default:
		return fmt.Sprintf("denied cost %d with remaining %d, but the model has more tokens", bk.Cost, bk.Remaining)
	}
}

// tokens describes the tokens a token-bucket state holds at t (µs).
func (m *model) tokens(bk *Bucket, st keyState, t int64) string {
	if !st.set {
		return fmt.Sprintf("%d (full)", bk.Limit.Burst)
	}
	r := float64(bk.Limit.Rate) / float64(bk.Limit.Period.Microseconds())
	B := float64(bk.Limit.Burst)
	f := float64(t - m.base)
	at := func(z float64) float64 { return math.Min(B, (f-z)*r) }
	return fmt.Sprintf("[%.4f, %.4f]", at(st.hi), at(st.lo))
}

// describe says what a bucket's state set is at time t (µs).
func (m *model) describe(bk *Bucket, st keyState, t int64) string {
	switch bk.Limit.Algorithm {
	case quota.TokenBucket:
		return m.tokens(bk, st, t) + " tokens"
	case quota.FixedWindow:
		w := floorDiv(t, bk.Limit.Period.Microseconds())
		if !st.set || st.win != w {
			return fmt.Sprintf("count 0 in window %d", w)
		}
		return fmt.Sprintf("count in [%d, %d] in window %d", st.clo, st.chi, w)
	}
	return "?"
}

// fixedWindow steps one fixed window run at time t (µs; every time of the
// choice is in t's window) with up to d units of unknown takes possibly
// applied before.
func fixedWindow(st keyState, bk *Bucket, out Outcome, t, d int64, explain bool) (keyState, string) {
	W, L, c := bk.Limit.Period.Microseconds(), bk.Limit.Rate, bk.Cost
	w := floorDiv(t, W)
	var cl, ch int64
	if st.set && st.win == w {
		cl, ch = st.clo, st.chi
	}
	ch += d
	c0l, c0h := cl, ch
	never := c > L
	allowedHere := out == Allowed || bk.Allowed
	if out == Allowed && !bk.Allowed {
		return st, "the take allowed but this bucket reported a deny"
	}
	if allowedHere {
		if never {
			return st, fmt.Sprintf("allowed a cost of %d above the limit %d", c, L)
		}
		ch = min(ch, L-c)
	} else if !never {
		cl = max(cl, L-c+1)
	}
	if out == Denied && !never {
		if m := bk.Remaining; m > 0 {
			cl, ch = max(cl, L-m), min(ch, L-m)
		} else {
			cl = max(cl, L)
		}
	}
	if cl > ch {
		if !explain {
			return st, "x"
		}
		if allowedHere && out == Allowed {
			return st, fmt.Sprintf("allowed cost %d over limit %d with count in [%d, %d]", c, L, c0l, c0h)
		}
		return st, fmt.Sprintf("%s cost %d with remaining %d against limit %d, count in [%d, %d]", map[bool]string{true: "allowed", false: "denied"}[allowedHere], c, bk.Remaining, L, c0l, c0h)
	}
	if out == Denied {
		return keyState{set: true, win: w, clo: cl, chi: ch}, ""
	}
	cl, ch = cl+c, ch+c
	if m := bk.Remaining; m > 0 {
		cl, ch = max(cl, L-m), min(ch, L-m)
	} else {
		cl = max(cl, L)
	}
	if cl > ch {
		if !explain {
			return st, "x"
		}
		return st, fmt.Sprintf("after charging %d the count is in [%d, %d], but the store reported remaining %d of %d", c, c0l+c, min(c0h, L-c)+c, bk.Remaining, L)
	}
	return keyState{set: true, win: w, clo: cl, chi: ch}, ""
}
