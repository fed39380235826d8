package history

import (
	"errors"
	"fmt"
	"hash/maphash"
	"math/rand/v2"
	"slices"
	"strings"
	"time"

	"github.com/floodgate-go/floodgate/quota"
)

// Verdict is the result of a check.
type Verdict uint8

// Verdicts.
const (
	// Linearizable: an order of the takes explains every answer.
	Linearizable Verdict = iota
	// NotLinearizable: no order does; Result.Counterexample says where the
	// search got furthest and why the next take cannot be placed.
	NotLinearizable
	// Inconclusive: the search ran out of its step or time budget.
	Inconclusive
)

// String returns "linearizable", "NOT linearizable" or "inconclusive".
func (v Verdict) String() string {
	return [...]string{"linearizable", "NOT linearizable", "inconclusive"}[v]
}

// Options bound and tune a check. The zero value is the defaults.
type Options struct {
	// MaxSteps bounds the search (default 50 000 000 steps).
	MaxSteps int
	// Timeout bounds the search (default 2 minutes).
	Timeout time.Duration
	// Skew widens every interval and the check of a take's Redis time
	// against its interval (default 0: the processes and Redis read one
	// host's clock).
	Skew time.Duration
}

// Result is what Check found.
type Result struct {
	// Takes is the number of answered takes placed; Unknown the takes of
	// unknown outcome, Resets the restarts and failovers.
	Takes, Unknown, Resets int
	// WithTime is the number of answered takes whose Redis time was known.
	WithTime int
	Verdict  Verdict
	// Steps is the number of placements the search tried.
	Steps   int
	Elapsed time.Duration
	// Counterexample, when NotLinearizable, is the take that cannot be
	// placed, why, and the takes placed before it on the same buckets.
	Counterexample string
}

// String is the one-line summary of r.
func (r Result) String() string {
	return fmt.Sprintf("%d takes checked (%d with Redis time, %d of unknown outcome, %d restarts or failovers): %s in %s (%d steps)",
		r.Takes, r.WithTime, r.Unknown, r.Resets, r.Verdict, r.Elapsed.Round(time.Millisecond), r.Steps)
}

// entry is a call or return event of the search's list.
type entry struct {
	op         int
	call       bool
	t          int64
	match      *entry
	prev, next *entry
}

// Check reports whether h is linearizable under the bucket model (see the
// package doc). It returns an error for a history it cannot model (an
// algorithm other than token bucket and fixed window, a bad limit).
//
// The takes are checked in parts that share no bucket (see split), each
// part with its own search and the whole step budget; the verdict is
// NotLinearizable if a part's is, else Inconclusive if a part's is.
func Check(h History, opt Options) (Result, error) {
	start := time.Now()
	if opt.MaxSteps <= 0 {
		opt.MaxSteps = 50_000_000
	}
	if opt.Timeout <= 0 {
		opt.Timeout = 2 * time.Minute
	}
	base, last := historySpan(h)
	deadline := start.Add(opt.Timeout)
	var total Result
	for _, p := range split(h) {
		r, err := checkPart(p.h, opt, p.orig, base, last, deadline)
		if err != nil {
			return total, err
		}
		total.Takes += r.Takes
		total.Unknown += r.Unknown
		total.WithTime += r.WithTime
		total.Steps += r.Steps
		if r.Verdict == NotLinearizable {
			total.Verdict, total.Counterexample = NotLinearizable, r.Counterexample
			break
		}
		if r.Verdict == Inconclusive {
			total.Verdict = Inconclusive
		}
	}
	total.Resets = len(h.Resets)
	total.Elapsed = time.Since(start)
	return total, nil
}

// historySpan returns the base of the model's times (µs, the earliest take's
// send) and the last answer (ns) of h, for every part alike.
func historySpan(h History) (base, last int64) {
	base = 1 << 62
	for i := range h.Ops {
		base = min(base, floorDiv(h.Ops[i].Sent, 1000))
		last = max(last, h.Ops[i].Answered)
	}
	return base, last
}

// part is one part of a history (see split) and the index in the whole
// history of each of its takes.
type part struct {
	h    History
	orig []int
}

// split cuts h into parts that share no bucket: takes are in one part
// when a chain of takes, each sharing a bucket with the next, joins them.
// A restart (a Reset without keys) is in every part; a failover (a Reset
// with keys) in each part holding one of its keys, with those keys.
//
// Checking the parts apart is checking the whole: linearizability is
// local (Herlihy and Wing), and a take lies in one part, so linearizations
// of the parts, each placing its takes at times in their intervals that
// never decrease, merge by those times into one of the whole. What the
// parts do not share is the instant a restart or failover happened, which
// each places in its interval on its own; a failover's buckets each lose
// an amount of their own anyway. A history of one part is checked as is.
// Splitting matters for the search: independent buckets' takes
// interleave in every order, and a failover's unknown outcomes with them.
func split(h History) []part {
	parent := map[string]string{}
	var find func(k string) string
	find = func(k string) string {
		p, ok := parent[k]
		if !ok {
			parent[k] = k
			return k
		}
		if p == k {
			return k
		}
		r := find(p)
		parent[k] = r
		return r
	}
	for i := range h.Ops {
		bs := h.Ops[i].Buckets
		for j := range bs {
			a, b := find(bs[0].Key), find(bs[j].Key)
			if a != b {
				parent[b] = a
			}
		}
	}
	idx := map[string]int{}
	var parts []part
	partOf := func(k string) int {
		r := find(k)
		n, ok := idx[r]
		if !ok {
			n = len(parts)
			idx[r] = n
			parts = append(parts, part{})
		}
		return n
	}
	for i := range h.Ops {
		n := 0
		if bs := h.Ops[i].Buckets; len(bs) > 0 {
			n = partOf(bs[0].Key)
		} else if len(parts) == 0 {
			parts = append(parts, part{})
		}
		parts[n].h.Ops = append(parts[n].h.Ops, h.Ops[i])
		parts[n].orig = append(parts[n].orig, i)
	}
	if len(parts) <= 1 {
		return []part{{h: h}}
	}
	for _, r := range h.Resets {
		if len(r.Keys) == 0 {
			for n := range parts {
				parts[n].h.Resets = append(parts[n].h.Resets, r)
			}
			continue
		}
		byPart := map[int][]string{}
		var order []int
		for _, k := range r.Keys {
			if _, ok := parent[k]; !ok {
				continue // no take on it: nothing to lose
			}
			n := partOf(k)
			if _, ok := byPart[n]; !ok {
				order = append(order, n)
			}
			byPart[n] = append(byPart[n], k)
		}
		for _, n := range order {
			parts[n].h.Resets = append(parts[n].h.Resets, Reset{From: r.From, To: r.To, Keys: byPart[n]})
		}
	}
	return parts
}

// checkPart is Check over one part: orig maps its takes to their index in the
// whole history (nil: the same), base and last are the whole's (historySpan).
func checkPart(h History, opt Options, orig []int, base, last int64, deadline time.Time) (Result, error) {
	start := time.Now()
	var res Result
	m := &model{keys: make(map[string]keyState), pend: make(map[string]*pending), seed: maphash.MakeSeed(), skew: opt.Skew.Microseconds(), orig: orig}
	num := m.num
	m.tclk, m.cut = -1<<62, -1<<62
	var errs []error
	for i := range h.Ops {
		o := &h.Ops[i]
		for _, b := range o.Buckets {
			if err := b.Limit.Validate(); err != nil {
				errs = append(errs, fmt.Errorf("take %d bucket %s: %w", num(i), b.Key, err))
			} else if a := b.Limit.Algorithm; a != quota.TokenBucket && a != quota.FixedWindow {
				errs = append(errs, fmt.Errorf("take %d bucket %s: the model has no %s", num(i), b.Key, a))
			}
			if b.Cost < 0 && !o.Report {
				errs = append(errs, fmt.Errorf("take %d bucket %s: cost %d is negative", num(i), b.Key, b.Cost))
			}
			if o.Report && b.Limit.Algorithm != quota.TokenBucket {
				errs = append(errs, fmt.Errorf("report %d bucket %s: the model reports token buckets only, not %s", num(i), b.Key, b.Limit.Algorithm))
			}
		}
		if o.Answered < o.Sent {
			errs = append(errs, fmt.Errorf("take %d: answered before it was sent", num(i)))
		}
		if o.Report && len(o.Buckets) != 1 {
			errs = append(errs, fmt.Errorf("report %d: %d buckets, want 1 (a report call is recorded bucket by bucket)", num(i), len(o.Buckets)))
		}
	}
	if len(errs) > 0 {
		return res, errors.Join(errs...)
	}
	m.base = base
	// Takes of unknown outcome are never placed (see the package doc);
	// the others, and the restarts, are.
	var placed []int
	resets := append([]Reset(nil), h.Resets...)
	type unk struct{ sent, cost int64 }
	byKey := map[string][]unk{}
	skewNs := opt.Skew.Nanoseconds()
	for i := range h.Ops {
		o := &h.Ops[i]
		if o.Outcome == Unknown {
			res.Unknown++
			for _, b := range o.Buckets {
				if b.Cost < 0 {
					// Units given back, perhaps: the bucket may hold
					// more, any amount up to full, from some time after
					// the call was sent.
					resets = append(resets, Reset{From: o.Sent, To: last, Keys: []string{b.Key}})
					continue
				}
				byKey[b.Key] = append(byKey[b.Key], unk{floorDiv(o.Sent, 1000) - m.skew, b.Cost})
			}
			continue
		}
		res.Takes++
		if o.Now != 0 {
			res.WithTime++
			if ns := o.Now * 1000; ns+999 < o.Sent-skewNs || ns > o.Answered+skewNs {
				res.Verdict = NotLinearizable
				res.Counterexample = fmt.Sprintf("take %d ran at a Redis time outside its interval: %s", num(i), o.String())
				res.Elapsed = time.Since(start)
				return res, nil
			}
		}
		placed = append(placed, i)
	}
	for k, us := range byKey {
		slices.SortFunc(us, func(a, b unk) int { return int(a.sent - b.sent) })
		p := &pending{sent: make([]int64, len(us)), sum: make([]int64, len(us)+1)}
		for j, u := range us {
			p.sent[j], p.sum[j+1] = u.sent, p.sum[j]+u.cost
		}
		m.pend[k] = p
	}
	m.ops, m.reset = h.Ops, resets
	res.Resets = len(h.Resets)
	for j := range resets {
		placed = append(placed, len(h.Ops)+j)
	}

	// The list of call and return events, in time order (a call before a
	// return at the same time: concurrent).
	ents := make([]*entry, 0, 2*len(placed))
	for _, i := range placed {
		t1, t2 := m.interval(i)
		c := &entry{op: i, call: true, t: t1}
		r := &entry{op: i, t: t2, match: c}
		c.match = r
		ents = append(ents, c, r)
	}
	slices.SortStableFunc(ents, func(a, b *entry) int {
		if a.t != b.t {
			if a.t < b.t {
				return -1
			}
			return 1
		}
		if a.call != b.call {
			if a.call {
				return -1
			}
			return 1
		}
		return a.op - b.op
	})
	head := &entry{}
	prev := head
	for _, e := range ents {
		prev.next, e.prev = e, prev
		prev = e
	}
	lift := func(e *entry) {
		e.prev.next = e.next
		if e.next != nil {
			e.next.prev = e.prev
		}
		r := e.match
		r.prev.next = r.next
		if r.next != nil {
			r.next.prev = r.prev
		}
	}
	unlift := func(e *entry) {
		r := e.match
		r.prev.next = r
		if r.next != nil {
			r.next.prev = r
		}
		e.prev.next = e
		if e.next != nil {
			e.next.prev = e
		}
	}
	rng := rand.New(rand.NewPCG(1, 2))
	zob := make([]uint64, len(h.Ops)+len(resets))
	for i := range zob {
		zob[i] = rng.Uint64()
	}
	type frame struct {
		u undo
		e *entry
	}
	var stack []frame
	var lin uint64
	cache := make(map[[2]uint64]struct{})
	best := -1
	e := head.next
	choice := 0
	for head.next != nil {
		res.Steps++
		if res.Steps > opt.MaxSteps || (res.Steps%4096 == 0 && time.Now().After(deadline)) {
			res.Verdict = Inconclusive
			res.Elapsed = time.Since(start)
			return res, nil
		}
		if e.call {
			ok, n, u, _ := m.apply(e.op, choice, false)
			if ok {
				key := [2]uint64{lin ^ zob[e.op], m.stateKey()}
				if _, seen := cache[key]; !seen {
					cache[key] = struct{}{}
					stack = append(stack, frame{u, e})
					lin ^= zob[e.op]
					lift(e)
					e, choice = head.next, 0
					continue
				}
				m.revert(&u)
			}
			if choice+1 < n {
				choice++
				continue
			}
			e, choice = e.next, 0
			continue
		}
		// A return: its take could not be placed before it.
		if len(stack) > best {
			best = len(stack)
			res.Counterexample = m.counterexample(e.op, stack2ops(stack, func(f frame) int { return f.u.op }))
		}
		if len(stack) == 0 {
			break
		}
		f := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		lin ^= zob[f.u.op]
		m.revert(&f.u)
		unlift(f.e)
		e, choice = f.e, f.u.choice+1
	}
	res.Elapsed = time.Since(start)
	if head.next != nil {
		res.Verdict = NotLinearizable
		return res, nil
	}
	res.Counterexample = ""
	return res, nil
}

func stack2ops[F any](s []F, op func(F) int) []int {
	out := make([]int, len(s))
	for i, f := range s {
		out[i] = op(f)
	}
	return out
}

// counterexample describes why op i cannot be placed after the placed
// takes (in order): its own reason, and the last takes placed on the
// bucket that refused it (on all its buckets when no one bucket did).
func (m *model) counterexample(i int, placed []int) string {
	var b strings.Builder
	what := fmt.Sprintf("take %d", m.num(i))
	if i >= len(m.ops) {
		what = fmt.Sprintf("restart %d", i-len(m.ops))
	}
	fmt.Fprintf(&b, "after %d takes placed in order, %s cannot be placed", len(placed), what)
	var whys []string
	m.whyKey = ""
	for c := 0; c < 16; c++ {
		ok, n, u, why := m.apply(i, c, true)
		if ok {
			m.revert(&u)
			whys = append(whys, "it can be placed here, but no take placed after it explains the rest")
			break
		}
		if why != "" {
			whys = append(whys, why)
		}
		if c+1 >= n {
			break
		}
	}
	fmt.Fprintf(&b, ": %s", strings.Join(whys, "; "))
	if i < len(m.ops) {
		keys := map[string]bool{}
		for _, bk := range m.ops[i].Buckets {
			if m.whyKey != "" && bk.Key != m.whyKey {
				continue
			}
			keys[bk.Key] = true
			if p := m.pend[bk.Key]; p != nil {
				if d := p.between(m.cut, 1<<62); d > 0 {
					fmt.Fprintf(&b, "\n  bucket %s: %d units of takes of unknown outcome may have been applied", bk.Key, d)
				}
			}
		}
		var before []string
		for j := len(placed) - 1; j >= 0 && len(before) < 6; j-- {
			p := placed[j]
			if p >= len(m.ops) {
				before = append(before, m.name(p))
				continue
			}
			for _, bk := range m.ops[p].Buckets {
				if keys[bk.Key] {
					before = append(before, m.name(p))
					break
				}
			}
		}
		slices.Reverse(before)
		fmt.Fprintf(&b, "\n  the take:     %s", m.name(i))
		for _, s := range before {
			fmt.Fprintf(&b, "\n  placed before %s", s)
		}
	}
	return b.String()
}

// num is take i's index in the whole history (see split).
func (m *model) num(i int) int {
	if m.orig != nil {
		return m.orig[i]
	}
	return i
}

func (m *model) name(i int) string {
	if i >= len(m.ops) {
		r := m.reset[i-len(m.ops)]
		if len(r.Keys) > 0 {
			return fmt.Sprintf("failover %d (%d buckets may have lost charges, from between %s and %s)", i-len(m.ops), len(r.Keys), stamp(r.From), stamp(r.To))
		}
		return fmt.Sprintf("restart %d (Redis empty from between %s and %s)", i-len(m.ops), stamp(r.From), stamp(r.To))
	}
	return fmt.Sprintf("take %d [%s]", m.num(i), m.ops[i].String())
}
