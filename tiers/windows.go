package tiers

import (
	"strconv"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/quota"
)

// Several windows per limit (Window). Every window of a limit is compiled
// into its own bucket: the first in tierLimit itself, the others in its
// more, each with a key suffix naming the algorithm and its period, so
// windows never share state. resolve adds every window of a matching rule
// as a level of the same take; decisions name each window
// "<rule>/<period>".

// windowSuffix is the key suffix of one window of a limit with several:
// ":" + algorithm + ":" + period ("…:token_bucket:1h"). A period's text
// has no '=', so it never reads as a key scope.
func windowSuffix(a quota.Algorithm, period time.Duration) string {
	return suffixOf(a) + ":" + shortDuration(period)
}

// limitsOf builds and checks the limit of a tier, rule or override (at
// path owner) from its Rate and Burst, or from its Windows.
func limitsOf(rep *reporter, owner string, rate Rate, burst int64, windows []Window, alg quota.Algorithm) (tierLimit, bool) {
	if len(windows) == 0 {
		l, ok := limitOf(rep, owner+".rate", owner+".burst", rate, burst, alg)
		return tierLimit{limit: l, suffix: suffixOf(l.Algorithm)}, ok
	}
	if rate != (Rate{}) || burst != 0 {
		rep.add(owner+".rate", "set rate and burst, or windows, not both")
		return tierLimit{}, false
	}
	if !alg.Known() {
		rep.addf(owner+".algorithm", "unknown algorithm %d", alg)
		return tierLimit{}, false
	}
	if len(windows) > maxWindows {
		rep.addf(owner+".rate", "%d windows; at most %d", len(windows), maxWindows)
		return tierLimit{}, false
	}
	ok := true
	ls := make([]quota.Limit, len(windows))
	for i, w := range windows {
		ix := "[" + strconv.Itoa(i) + "]"
		rp := owner + ".rate" + ix
		switch {
		case w.Rate.Tier:
			rep.add(rp, `a window's rate cannot be "tier"`)
			ok = false
			continue
		case w.Rate == (Rate{}):
			rep.add(rp, "required")
			ok = false
			continue
		}
		l, lok := limitOf(rep, rp, owner+".burst"+ix, w.Rate, w.Burst, alg)
		if !lok {
			ok = false
			continue
		}
		for j := range i {
			if ls[j].Period == l.Period {
				rep.addf(rp, "rate[%d] has the same period, %s: the windows of one limit need distinct periods", j, shortDuration(l.Period))
				ok = false
			}
		}
		ls[i] = l
	}
	if !ok {
		return tierLimit{}, false
	}
	if len(ls) == 1 {
		return tierLimit{limit: ls[0], suffix: suffixOf(alg)}, true
	}
	tl := tierLimit{limit: ls[0], suffix: windowSuffix(alg, ls[0].Period), more: make([]tierLimit, 0, len(ls)-1)}
	for _, l := range ls[1:] {
		tl.more = append(tl.more, tierLimit{limit: l, suffix: windowSuffix(alg, l.Period)})
	}
	return tl, true
}

// minCapacity is the smallest capacity of tl's windows: the largest cost
// a request can be charged at every one of them.
func (tl *tierLimit) minCapacity() int64 {
	c := tl.limit.Capacity()
	for i := range tl.more {
		c = min(c, tl.more[i].limit.Capacity())
	}
	return c
}

// windowName is how decisions name one window of a limit with several.
type windowName struct {
	period time.Duration
	name   string
}

// nameWindows records the name of every window of tl, when it has several.
func (r *cRule) nameWindows(tl *tierLimit) {
	if tl.more == nil {
		return
	}
	add := func(p time.Duration) {
		for _, w := range r.winNames {
			if w.period == p {
				return
			}
		}
		r.winNames = append(r.winNames, windowName{p, r.name + "/" + shortDuration(p)})
	}
	add(tl.limit.Period)
	for i := range tl.more {
		add(tl.more[i].limit.Period)
	}
}

// policyName is the name decisions give bucket b of rule r: the rule's
// name, or "<rule>/<period>" when the bucket is one window of a limit with
// several (m.multi).
func (r *cRule) policyName(m *meta, b *quota.Bucket) string {
	if !m.multi {
		return r.name
	}
	for _, w := range r.winNames {
		if w.period == b.Limit.Period {
			return w.name
		}
	}
	return r.name + "/" + shortDuration(b.Limit.Period) // not reached: compile names every window
}

// addWindows adds the buckets of tl's windows after its first (m is the
// first's meta), each keyed by the key body at sc.buf[start:end] (a keyed
// rule) or by body (a rule without key) and the window's suffix.
func (sc *scratch) addWindows(tl *tierLimit, m meta, cost int64, cr *cRule, start, end int, body string) {
	for i := range tl.more {
		w := &tl.more[i]
		s := len(sc.buf)
		if body != "" {
			sc.buf = append(sc.buf, body...)
		} else {
			sc.buf = append(sc.buf, sc.buf[start:end]...)
		}
		sc.buf = append(sc.buf, w.suffix...)
		m.start, m.end = int32(s), int32(len(sc.buf))
		sc.metas = append(sc.metas, m)
		sc.addBucket("", w.limit, cost, cr)
	}
}

// quotas lists the windows a decision bound to bucket best of sc.all
// reports (floodgate.Decision.Quotas), among the buckets its take decided
// (the enforced ones, or the shadow ones): best first, then the other
// windows of its rule, then, on a deny, every other bucket that denied,
// except those of rules that hide their quota. nil when that is the
// binding bucket alone, or when the binding rule hides its quota.
func (sc *scratch) quotas(c *compiled, best int, allowed bool) []floodgate.Quota {
	bm := &sc.metas[best]
	if c.rules[bm.rule].hide {
		return nil
	}
	in := func(i int) bool { return sc.taken[i] && sc.metas[i].shadow == bm.shadow }
	violated := func(i int) bool {
		return sc.metas[i].rule != bm.rule && !allowed && !sc.res[i].Allowed && !c.rules[sc.metas[i].rule].hide
	}
	n := 0
	for i := range sc.all {
		if in(i) && (i == best || sc.metas[i].rule == bm.rule || violated(i)) {
			n++
		}
	}
	if n < 2 {
		return nil
	}
	out := make([]floodgate.Quota, 0, n)
	out = append(out, sc.quota(c, best, &sc.res[best]))
	for i := range sc.all { // the binding rule's other windows
		if in(i) && i != best && sc.metas[i].rule == bm.rule {
			out = append(out, sc.quota(c, i, &sc.res[i]))
		}
	}
	for i := range sc.all { // every other violated window
		if in(i) && violated(i) {
			out = append(out, sc.quota(c, i, &sc.res[i]))
		}
	}
	return out
}

// quota describes bucket k of sc.all, charged with result res.
func (sc *scratch) quota(c *compiled, k int, res *quota.Result) floodgate.Quota {
	m := &sc.metas[k]
	b := &sc.all[k]
	q := floodgate.Quota{
		Policy:    c.rules[m.rule].policyName(m, b),
		Limit:     res.Limit,
		Window:    b.Limit.Period,
		Remaining: max(res.Remaining, 0),
		Reset:     res.Reset,
		Violated:  !res.Allowed,
	}
	if q.Limit == 0 {
		q.Limit = b.Limit.Capacity()
	}
	if q.Violated && res.RetryAfter > 0 {
		q.RetryAfter = res.RetryAfter
	}
	return q
}
