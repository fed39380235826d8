package demo

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"
)

// Caption is one finding of the run, in words, with the numbers computed
// from the report's own data.
type Caption struct {
	ID    string // "sources", "fault", "shed", "denials", "latency", "tiers", "priorities", "overload"
	Title string
	Text  string
}

// Caption returns the caption with id, if present.
func (r *Report) Caption(id string) (Caption, bool) {
	for _, c := range r.Captions() {
		if c.ID == id {
			return c, true
		}
	}
	return Caption{}, false
}

// pct formats n as a share of d: "34%", "<1%" for a non-zero share that
// rounds to 0, "0%" when d is 0.
func pct(n, d int) string {
	if d == 0 || n == 0 {
		return "0%"
	}
	p := math.Round(100 * float64(n) / float64(d))
	if p == 0 {
		return "<1%"
	}
	return fmt.Sprintf("%.0f%%", p)
}

// policyWhy says what each of the demo's policies stands for.
var policyWhy = map[string]string{
	"shedder":            "the service was full and the shedder dropped low priorities (503)",
	"tenant-plan":        "a tenant over its plan tier (429)",
	"ip-safety-net":      "one IP over 100/s (429)",
	"login-ip-user":      "over 5 login attempts a minute from one IP for one user (429)",
	"grpc-login-ip-user": "gRPC login attempts per IP and user (429)",
	"search-user":        "a user over 20 searches/s (429)",
	"per-user-in-flight": "a user with 8 requests already in flight",
	"concurrency":        "the in-flight cap of the whole service",
}

// sumIn is the sum of v over the buckets in [from, to).
func (r *Report) sumIn(v []int, from, to time.Duration) int {
	n := 0
	for i, x := range v {
		if r.Axis.InWindow(i, from, to) {
			n += x
		}
	}
	return n
}

// pointsIn sums the points of a series over the buckets in [from, to).
func (r *Report) pointsIn(pts []Point, from, to time.Duration) Point {
	var out Point
	for i, p := range pts {
		if r.Axis.InWindow(i, from, to) {
			out.Offered += p.Offered
			out.Allowed += p.Allowed
			out.Limited += p.Limited
			out.Shed += p.Shed
		}
	}
	return out
}

// Captions computes the report's findings from its data.
func (r *Report) Captions() []Caption {
	var out []Caption
	add := func(id, title, format string, args ...any) {
		out = append(out, Caption{ID: id, Title: title, Text: fmt.Sprintf(format, args...)})
	}
	// Where rate-limit decisions were made.
	total, degraded := 0, 0
	for _, src := range Sources {
		n := sum(r.Sources[src])
		total += n
		if src.Degraded() {
			degraded += n
		}
	}
	var parts []string
	for _, src := range Sources {
		if n := sum(r.Sources[src]); n > 0 {
			parts = append(parts, fmt.Sprintf("%s %d (%s)", src, n, pct(n, total)))
		}
	}
	where := "the store"
	if r.Breaker != nil {
		where = "Redis"
	}
	add("sources", "Where rate-limit decisions were made",
		"%d rate-limit decisions: %s. store and cache answers come from %s (cache: a denial remembered until its retry-after); "+
			"lease and async are decided locally on units leased from, or state last reported by, %s; "+
			"local_fallback, fail_open and fail_closed are decided without it: %d (%s).",
		total, strings.Join(parts, ", "), where, where, degraded, pct(degraded, total))

	// The Redis fault.
	if ev, ok := r.Event("fault"); ok && r.Fault != nil {
		inWin, degIn, degOut := 0, 0, 0
		var degParts, otherParts []string
		for _, src := range Sources {
			v := r.Sources[src]
			n := r.sumIn(v, ev.From, ev.To)
			inWin += n
			switch {
			case src.Degraded():
				degIn += n
				degOut += sum(v) - n
				if n > 0 {
					degParts = append(degParts, fmt.Sprintf("%s %d", src, n))
				}
			case n > 0:
				otherParts = append(otherParts, fmt.Sprintf("%s %d", src, n))
			}
		}
		down, up := r.Fault.verb()
		recovered := fmt.Sprintf("and %s at %s", up, fmtSec(ev.To))
		if r.Fault.For == 0 {
			recovered = "and not " + strings.TrimSuffix(up, " (empty)") + " before the end of the run"
		}
		detail := ""
		if len(degParts) > 0 {
			detail = " (" + strings.Join(degParts, ", ") + ")"
		}
		if len(otherParts) > 0 {
			detail += "; the others on leases and last known state, or by Redis before the breaker saw it fail (" + strings.Join(otherParts, ", ") + ")"
		}
		add("fault", "The Redis fault",
			"%s at %s %s. In the buckets of that window, %d rate-limit decisions, %d of them (%s) made without Redis%s. Outside the window, %d were made without Redis. %s "+
				"Rules with on_store_error: closed (login) deny while Redis is away; the others decide on local limiters scaled to this instance's share, so traffic keeps flowing.",
			down, fmtSec(ev.From), recovered, inWin, degIn, pct(degIn, inWin), detail, degOut, r.breakerSummary())
	}

	// What was shed and why.
	a, _ := r.Row("all")
	text := fmt.Sprintf("%d requests offered: %d allowed, %d limited (429, a rate limit), %d shed (503, the shedder), %d failed.",
		a.Offered, a.Allowed, a.Limited, a.Shed, a.Failed)
	if ev, ok := r.Event("surge"); ok {
		in := r.pointsIn(r.Series["all"], ev.From, ev.To)
		secs := ev.To - ev.From
		text += fmt.Sprintf(" During the surge (%s–%s) %d requests were offered (%.0f/s) to a service that serves at most %d at once, %s each (about %d/s): %d shed, by priority ",
			fmtSec(ev.From), fmtSec(ev.To), in.Offered, float64(in.Offered)/secs.Seconds(), shedCapacity, workTime, int(shedCapacity*time.Second/workTime), in.Shed)
		var ps []string
		for _, p := range []string{"test", "read", "write", "critical"} {
			pi := r.pointsIn(r.Series["priority="+p], ev.From, ev.To)
			ps = append(ps, fmt.Sprintf("%s %d of %d (%s)", p, pi.Shed, pi.Offered, pct(pi.Shed, pi.Offered)))
		}
		text += strings.Join(ps, ", ") + fmt.Sprintf("; outside the surge, %d. The shedder drops the lowest priority first (test, then read), whatever the tenant's plan.",
			a.Shed-in.Shed)
	}
	out = append(out, Caption{ID: "shed", Title: "What was shed and why", Text: text})

	// Denials by policy.
	type pol struct {
		name string
		n    int
	}
	var pols []pol
	dTotal := 0
	for name, v := range r.Denials {
		pols = append(pols, pol{name, sum(v)})
		dTotal += sum(v)
	}
	slices.SortFunc(pols, func(a, b pol) int { return cmp.Or(cmp.Compare(b.n, a.n), cmp.Compare(a.name, b.name)) })
	var dParts []string
	for _, p := range pols {
		why := policyWhy[p.name]
		if why != "" {
			why = ": " + why
		}
		dParts = append(dParts, fmt.Sprintf("%s %d%s", p.name, p.n, why))
	}
	if len(dParts) == 0 {
		dParts = []string{"none"}
	}
	add("denials", "Denials by policy", "%d denials by the services: %s.", dTotal, strings.Join(dParts, "; "))

	// The attacks.
	var atk []string
	if row, ok := r.Row("scenario=attack"); ok {
		s := fmt.Sprintf("the scraper sent %d requests from one IP", row.Offered)
		if ev, ok := r.Event("scraper"); ok {
			s += fmt.Sprintf(" (%s–%s)", fmtSec(ev.From), fmtSec(ev.To))
		}
		atk = append(atk, s+fmt.Sprintf(": %d allowed, %d limited (%s) by its tenant's pro plan (60/s) and the per-IP safety net (100/s)",
			row.Allowed, row.Limited, pct(row.Limited, row.Offered)))
	}
	if row, ok := r.Row("scenario=brute-force"); ok {
		s := fmt.Sprintf("the login brute force made %d attempts for one user from one IP: %d allowed, %d limited (login-ip-user allows 5 a minute and fails closed while Redis is away)",
			row.Offered, row.Allowed, row.Limited)
		if r.Fault != nil && r.Fault.Kind == FaultKill && r.Fault.For > 0 {
			s += "; the restarted Redis was empty, so every bucket, this one too, started afresh"
		}
		atk = append(atk, s)
	}
	if len(atk) > 0 {
		add("attacks", "The attacks", "%s.", upperFirst(strings.Join(atk, "; ")))
	}

	// Latency.
	worst, worstAt := time.Duration(0), -1
	for i, l := range r.Latency {
		if l.P99 > worst {
			worst, worstAt = l.P99, i
		}
	}
	lat := fmt.Sprintf("%d admitted requests: p50 %s, p99 %s over the run (each handler works %s).",
		r.Admitted.Count, fmtDur(r.Admitted.P50), fmtDur(r.Admitted.P99), workTime)
	if worstAt >= 0 {
		lo, hi := r.Axis.Span(worstAt)
		lat += fmt.Sprintf(" Slowest bucket: p99 %s at %s–%s%s.", fmtDur(worst), fmtSec(lo), fmtSec(hi), r.during(worstAt))
	}
	out = append(out, Caption{ID: "latency", Title: "Latency of admitted requests", Text: lat})

	// Tiers.
	var tParts []string
	for _, tier := range []string{"free", "pro", "enterprise"} {
		row, ok := r.Row("tier=" + tier)
		if !ok {
			continue
		}
		s := fmt.Sprintf("%s: %d offered, %d limited (%s), %d shed (%s)", tier, row.Offered, row.Limited, pct(row.Limited, row.Offered), row.Shed, pct(row.Shed, row.Offered))
		if row.Shed > 0 {
			var by []string
			for _, p := range []string{"test", "read", "write", "critical"} {
				if c, ok := r.Row("tier=" + tier + ",priority=" + p); ok && c.Shed > 0 {
					by = append(by, fmt.Sprintf("%s %d", p, c.Shed))
				}
			}
			s += " — shed by priority: " + strings.Join(by, ", ")
			if ev, ok := r.Event("surge"); ok {
				s += fmt.Sprintf("; %d of them in the surge", r.pointsIn(r.Series["tier="+tier], ev.From, ev.To).Shed)
			}
		}
		tParts = append(tParts, s)
	}
	add("tiers", "Tenant plan tiers",
		"%s. Limits come from the plan (free 10/s, pro 60/s, enterprise 2000/s per tenant), so free tenants are limited first; "+
			"shedding comes from the service being full and goes by priority, not plan: the enterprise tier's synthetic checks are test traffic and its batch surge is reads and writes.",
		strings.Join(tParts, "; "))

	// Priorities.
	var pParts []string
	for _, p := range []string{"critical", "write", "read", "test"} {
		if row, ok := r.Row("priority=" + p); ok {
			pParts = append(pParts, fmt.Sprintf("%s shed %d of %d (%s)", p, row.Shed, row.Offered, pct(row.Shed, row.Offered)))
		}
	}
	add("priorities", "Priorities", "%s. Critical traffic (payments, logins) is never shed; test traffic goes first, then reads.", strings.Join(pParts, "; "))
	if r.Compare != nil {
		if text := r.Compare.caption(); text != "" {
			add("overload", "Fixed and adaptive capacity under overload", "%s", text)
		}
	}
	return out
}

// breakerSummary says when the Redis breaker was open.
func (r *Report) breakerSummary() string {
	var open time.Duration
	first := time.Duration(-1)
	n := 0
	for _, s := range r.Breaker {
		if s.State != "open" {
			continue
		}
		n++
		open += s.To - s.From
		if first < 0 {
			first = s.From
		}
	}
	if n == 0 {
		return "The breaker never opened."
	}
	closedAgain := "and was still not closed at the end"
	if fin := r.Breaker[len(r.Breaker)-1]; fin.State == "closed" {
		closedAgain = "and closed again at " + fmtSec(fin.From)
	}
	times := "once"
	if n > 1 {
		times = fmt.Sprintf("%d times (half-open probes failed in between)", n)
	}
	return fmt.Sprintf("The breaker opened at %s, %s, for %s in all, %s.", fmtSec(first), times, fmtSec(open), closedAgain)
}

// during names the events bucket i falls in: " (surge, Redis fault)".
func (r *Report) during(i int) string {
	var in []string
	for _, e := range r.Events {
		if e.From <= 0 && e.To >= r.Duration {
			continue
		}
		if r.Axis.InWindow(i, e.From, e.To) {
			in = append(in, e.Name)
		}
	}
	if len(in) == 0 {
		return ""
	}
	return ", during " + strings.Join(in, " and ")
}

func upperFirst(s string) string {
	if s == "" {
		return s
	}
	return strings.ToUpper(s[:1]) + s[1:]
}
