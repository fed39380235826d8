package memstore

import (
	"math"
	"time"

	"github.com/floodgate-go/floodgate/quota"
)

// µs converts a count of µs to a Duration, saturating at the largest
// Duration (292 years): a burst of 1e9 refilled at 1 per year resets in
// 1e9 years, which no Duration can hold.
func µs(v int64) time.Duration {
	switch {
	case v > math.MaxInt64/int64(time.Microsecond):
		return math.MaxInt64
	case v < math.MinInt64/int64(time.Microsecond):
		return math.MinInt64
	}
	return time.Duration(v) * time.Microsecond
}

func floorDiv(a, b int64) int64 {
	q := a / b
	if a%b != 0 && a < 0 {
		q--
	}
	return q
}

// decide fills p with the decision on b at now, by the arithmetic in the
// quota.Algorithm doc. It changes no state except dropping expired
// timestamps from a sliding window log, which the arithmetic does on every
// call.
//
// Take makes the same switch itself, so that its decisions cost one call
// per bucket.
func decide(p *pending, b *quota.Bucket, now int64) {
	switch b.Limit.Algorithm {
	case quota.TokenBucket:
		decideTokenBucket(p, b, now)
	case quota.GCRA:
		decideGCRA(p, b, now)
	case quota.SlidingWindowCounter:
		decideSlidingCounter(p, b, now)
	case quota.SlidingWindowLog:
		decideSlidingLog(p, b, now)
	case quota.FixedWindow:
		decideFixedWindow(p, b, now)
	}
}

// denyOver makes p a deny that never admits: the cost is above the
// bucket's capacity, whatever the arithmetic said.
func denyOver(p *pending) {
	p.allow = false
	p.retry = -1
}

// maxWait is the longest wait, in µs, b may book (Bucket.MaxWait); -1
// without MaxWait, which no wait (at least 1 µs) is within.
func maxWait(b *quota.Bucket) int64 {
	if mw := int64(b.MaxWait / time.Microsecond); mw > 0 {
		return mw
	}
	return -1
}

// decideTokenBucket is decide for a token bucket.
func decideTokenBucket(p *pending, b *quota.Bucket, now int64) {
	lim, c, mw := &b.Limit, b.Cost, maxWait(b)
	per, over := int64(lim.Period/time.Microsecond), c > lim.Burst
	B, N, P, cf := float64(lim.Burst), float64(lim.Rate), float64(per), float64(c)
	var e *entry
	if !p.fresh {
		e = p.e
	}
	tokens, r := e.tokens(p.fresh, B, N, P, now)
	p.allow = cf <= tokens
	// Below 0 tokens (a settlement's debt, units booked ahead) there
	// is nothing remaining.
	p.remNo = max(0, floorI(tokens))
	if r == 0 {
		p.resetNo = ceilI(((B - tokens) * P) / N)
	} else {
		p.resetNo = ceilI((B - tokens) / r)
	}
	if !p.allow && !over {
		p.retry = tbRetry(e, now, tokens, cf, B, N, P, r)
		if p.retry <= mw {
			p.allow, p.wait, p.retry = true, p.retry, 0
		}
	}
	if p.allow {
		t2 := tokens - cf
		p.f, p.ts, p.under, p.rate = t2, now, B, N/P
		p.remCh = max(0, floorI(t2))
		p.resetCh = ceilI(((B - t2) * P) / N)
		p.expires = satAdd(now, max(p.resetCh, minTTL))
	}
	if over {
		denyOver(p)
	}
}

// tbRetry is the retry-after at now of a token bucket e (never absent:
// an absent bucket denies only a cost above its burst) for cost c, with
// tokens at rate N/P (r == 0) or r units per µs: the µs until tokens
// reach c, one more when the rounded quotient leaves the tokens a read
// at that time finds short of c by the last bit.
func tbRetry(e *entry, now int64, tokens, c, B, N, P, r float64) int64 {
	var retry int64
	if r == 0 {
		retry = ceilI(((c - tokens) * P) / N)
	} else {
		retry = ceilI((c - tokens) / r)
	}
	if e != nil && retry < math.MaxInt64-now {
		if t, _ := e.tokensAfter(max(0, now-e.ts)+retry, B, N, P); t < c {
			retry++
		}
	}
	return retry
}

// decideGCRA is decide for GCRA.
func decideGCRA(p *pending, b *quota.Bucket, now int64) {
	lim, c, mw := &b.Limit, b.Cost, maxWait(b)
	per, over := int64(lim.Period/time.Microsecond), c > lim.Burst
	B, N, P, cf := float64(lim.Burst), float64(lim.Rate), float64(per), float64(c)
	T := P / N
	// The explicit conversions forbid fused multiply-add (the Go spec
	// allows fusing otherwise), so every product is rounded on its own,
	// as in Lua.
	BT := float64(B * T)
	sl := quota.GCRASlack // at most half an emission interval
	if h := T / 2; h < sl {
		sl = h
	}
	tol := float64(BT + sl)
	// Times relative to quota.GCRAEpoch: the int64 difference is exact,
	// and so is its conversion for any now within 285 years of it.
	tf := float64(now - quota.GCRAEpoch)
	var e *entry
	if !p.fresh {
		e = p.e
	}
	tat, stored, tw := e.tat(p.fresh, T, tf)
	tat0 := tat
	if tf > tat0 {
		tat0 = tf
	}
	tat1 := tat0 + float64(cf*T)
	p.allow = tat1-tf <= tol
	p.remNo = max(0, floorI((tol-(tat0-tf))/T))
	if tw == 0 {
		p.resetNo = ceilI(tat0 - tf)
	} else { // draining at tw until written: full at the stored TAT
		p.resetNo = ceilI(stored - tf)
	}
	if !p.allow && !over {
		if tw == 0 {
			p.retry = ceilI(tat1 - tf - BT - sl)
		} else { // when (stored - t) / tw units, at T each, leave room for c
			p.retry = ceilI((stored - tf) - float64(float64(tol-float64(cf*T))*tw)/T)
		}
		if p.retry <= mw {
			p.allow, p.wait, p.retry = true, p.retry, 0
		}
	}
	if p.allow {
		p.f, p.under = tat1, T
		p.remCh = max(0, floorI((tol-(tat1-tf))/T))
		p.resetCh = ceilI(tat1 - tf)
		p.expires = satAdd(now, max(p.resetCh, minTTL))
	}
	if over {
		denyOver(p)
	}
}

// decideSlidingCounter is decide for a sliding window counter.
func decideSlidingCounter(p *pending, b *quota.Bucket, now int64) {
	lim, c := &b.Limit, b.Cost
	per, over := int64(lim.Period/time.Microsecond), c > lim.Rate
	W, L := per, lim.Rate
	w := floorDiv(now, W)
	e := now - w*W
	var curr, prev int64
	left := int64(noEnd)
	if !p.fresh {
		curr, prev, left = p.e.counts(w, W, now)
	}
	Wf, Lf := float64(W), float64(L)
	weighted := (float64(prev)*float64(W-e))/Wf + float64(curr)
	p.allow = weighted+float64(c) <= Lf
	p.remNo = max(0, floorI(Lf-weighted))
	p.resetNo = min(swcReset(curr, prev, w, W, now), left)
	if p.allow {
		p.win, p.curr, p.prev, p.under = w, curr+c, prev, float64(W)
		p.remCh = max(0, floorI(Lf-weighted-float64(c)))
		p.resetCh = swcReset(curr+c, prev, w, W, now)
		p.expires = (w + 2) * W
	} else if !over {
		if curr+c <= L {
			p.retry = ceilI(Wf-(float64(L-curr-c)*Wf)/float64(prev)) - e
		} else {
			p.retry = (W - e) + ceilI(math.Max(0, Wf-(float64(L-c)*Wf)/float64(curr)))
		}
		p.retry = min(p.retry, left)
	}
	if over {
		denyOver(p)
	}
}

// decideSlidingLog is decide for a sliding window log.
func decideSlidingLog(p *pending, b *quota.Bucket, now int64) {
	lim, c := &b.Limit, b.Cost
	per, over := int64(lim.Period/time.Microsecond), c > lim.Rate
	W, L := per, lim.Rate
	var lg *ring
	var n int64
	if !p.fresh {
		lg = p.e.log
		lg.dropThrough(now - W)
		n = lg.total
		// The log lasts a window beyond its newest entry, the window in
		// force: a longer one than it was charged under keeps it longer
		// (as the Redis store's PEXPIRE GT on every take).
		if n > 0 {
			p.e.expires = max(p.e.expires, satAdd(lg.newest()+W, ttlSlack))
		}
	}
	p.allow = n+c <= L
	p.remNo = max(0, L-n) // a lowered limit can leave n > L
	if n > 0 {
		p.resetNo = lg.newest() + W - now
	}
	if p.allow {
		p.remCh = max(0, L-n-c)
		p.resetCh = p.resetNo
		if c > 0 {
			newest := now
			if n > 0 && lg.newest() > now {
				newest = lg.newest()
			}
			p.resetCh = newest + W - now
		}
	} else if !over {
		p.retry = lg.kth(n+c-L) + W - now
	}
	if over {
		denyOver(p)
	}
}

// decideFixedWindow is decide for a fixed window.
func decideFixedWindow(p *pending, b *quota.Bucket, now int64) {
	lim, c := &b.Limit, b.Cost
	per, over := int64(lim.Period/time.Microsecond), c > lim.Rate
	W, L := per, lim.Rate
	w := floorDiv(now, W)
	end, z := (w+1)*W, (w+1)*W
	if !b.Span.IsZero() { // a calendar window: identified by its start
		w, z = b.Span.Start.UnixMicro(), b.Span.End.UnixMicro()
		end = max(z, now+1)
	}
	var count int64
	left := end - now
	if !p.fresh {
		// a count carried from a window of another length lasts as long
		// as that window
		if count, left = p.e.windowCount(now); count == 0 {
			left = end - now
		}
	}
	p.allow = count+c <= L
	p.remNo = max(0, L-count) // a lowered limit can leave count > L
	p.resetNo = left
	if p.allow {
		p.win, p.curr, p.under = w, count+c, float64(z)
		p.remCh = max(0, L-count-c)
		p.resetCh = end - now
		p.expires = end
	} else if !over {
		p.retry = left
	}
	if over {
		denyOver(p)
	}
}

func swcReset(curr, prev, w, W, now int64) int64 {
	switch {
	case curr > 0:
		return (w+2)*W - now
	case prev > 0:
		return (w+1)*W - now
	}
	return 0
}

func floorI(x float64) int64 { return toInt(math.Floor(x)) }
func ceilI(x float64) int64  { return toInt(math.Ceil(x)) }

// satAdd returns a+b for b >= 0, saturating at the largest int64.
func satAdd(a, b int64) int64 {
	if a > math.MaxInt64-b {
		return math.MaxInt64
	}
	return a + b
}

// toInt converts an integral float to int64, saturating where Go's
// conversion would be undefined.
func toInt(x float64) int64 {
	switch {
	case x >= 0x1p63:
		return math.MaxInt64
	case x < -0x1p63:
		return math.MinInt64
	}
	return int64(x)
}
