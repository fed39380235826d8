package tiers

import (
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/internal/reqctx"
	"github.com/floodgate-go/floodgate/quota"
)

// meta is what the engine knows of one matched rule besides its bucket.
// It holds no pointers, so filling and discarding metas costs no write
// barriers.
type meta struct {
	rule        int32 // index in compiled.rules; -1: a descriptor's own limit (rlsCompiled.own)
	start, end  int32 // the bucket's key is buf[start:end]; start < 0: prebuilt
	fromRequest bool  // cost came from Request.Cost
	multi       bool  // one window of a limit with several: named "<rule>/<period>"
	shadow      bool  // decided as a shadow rule: Rule.Shadow, Policy.Shadow, or outside EnforcePercent
	over        bool  // a shadow bucket decided without a take: the request's cost is above its capacity
	soft        bool  // a soft rule's (Rule.Soft): it never denies and never binds
	softOver    bool  // a soft bucket that would deny: left out of the take, the request marked
}

// scratch is what one call of the engine needs; pooled per Limiter.
type scratch struct {
	// kb, buf, skipped and names serve resolving one request: the key
	// builder, the buffer its keys are built in, the rules it matched but
	// lacked an identity component for (indices in compiled.rules), and
	// the buffer their names are joined in.
	kb      *keyBuilder
	buf     []byte
	skipped []int32
	names   []byte

	// items are the call's requests. all holds the bucket of every rule
	// they matched, shared by the requests that resolve to the same one,
	// metas their rules, res the results and taken whether a take (or the
	// capacity check) decided each. shadows: some bucket is a shadow
	// rule's; costs: some bucket's cost is the request's (a single
	// request); over: some shadow bucket was decided over its capacity.
	items   []callItem
	all     []quota.Bucket
	metas   []meta
	res     []quota.Result
	taken   []bool
	shadows bool
	costs   bool
	over    bool
	gone    bool // a take failed after the caller's context ended (callerGone)
	// softs: some bucket is a soft rule's; softOver: some soft bucket is
	// left out of the takes (meta.softOver).
	softs, softOver bool
	// refs lists, request by request, the indices in all of its buckets:
	// request k's are refs[ends[k-1]:ends[k]]. bound is each request's
	// binding bucket (an index in all), or -1.
	refs  []int32
	ends  []int32
	bound []int32
	// index finds a shared bucket by key once there are many.
	index map[mergeKey]int32
	// part, partIdx and partRes are one take's buckets, their indices in
	// all, and its results, when it takes only some of all.
	part    []quota.Bucket
	partIdx []int32
	partRes []quota.Result
	// want is each bucket's cost while a take reads it at 0 (peekTake).
	want []int64
	// est are the named meters' estimates of the single request being
	// admitted (compiled.meterEst); nil: none.
	est *reqctx.Meters
	// charged is what the takes charged, kept for rules that settle or
	// wait.
	charged charges

	// req is the request AdmitDescriptors builds for each descriptor, and
	// hdrs their headers; targets, idx and dec are its per descriptor: its
	// target rule, its item and the item's decision (pooled rather than
	// on the stack: 64 Decisions are 10 KB, which the goroutine's stack
	// would grow for on every call).
	req     []floodgate.Request
	hdrs    []floodgate.Header
	targets []*rlsTarget
	idx     []int32
	dec     []floodgate.Decision
	// denies: a limited descriptor of the call matched a Deny target or
	// has a limit of 0 of its own; gives: one gives back (GiveBack).
	denies, gives bool
	// domain is the domain of the call AdmitDescriptors decides.
	domain string
}

func newScratch() *scratch {
	return &scratch{
		kb:    newKeyBuilder(),
		buf:   make([]byte, 0, 256),
		items: make([]callItem, 0, 1),
		metas: make([]meta, 0, 8),
		all:   make([]quota.Bucket, 0, 8),
		res:   make([]quota.Result, 8),
		taken: make([]bool, 8),
		refs:  make([]int32, 0, 8),
		ends:  make([]int32, 0, 1),
		bound: make([]int32, 1),
	}
}

const maxPooledBuf = 64 << 10

// release returns sc to the pool, unless a call made it unusually large.
func (l *Limiter) release(sc *scratch) {
	sc.est = nil
	if cap(sc.buf) > maxPooledBuf || cap(sc.all) > 4*maxItems {
		return
	}
	// sc.all is not cleared: clearing its Buckets, five pointers each, was
	// a bulk write barrier per call whenever the GC was marking, and every
	// bucket the next call uses is written whole (addBucket, or a copy).
	// The keys it keeps alive until then are the recent keys' (setKeys).
	// Only the used prefixes of the rest hold anything: every use starts
	// from length 0 of a scratch cleared this way.
	if len(sc.part) > 0 {
		clear(sc.part)
	}
	for i := range sc.items {
		sc.items[i].req, sc.items[i].own = nil, nil
	}
	if len(sc.targets) > 0 { // what AdmitDescriptors built
		clear(sc.req)
		clear(sc.hdrs)
		clear(sc.targets)
		clear(sc.dec)
	}
	if len(sc.index) > 0 {
		clear(sc.index)
	}
	l.pool.Put(sc)
}

// resolve appends to sc.metas and sc.all (without the keys built in
// sc.buf: see setKeys) the buckets r is charged to at the rules
// c.rules[lo:hi], building their keys in sc.buf. For the whole list it
// looks only at the rules r's method can match (compiled.index), in rule
// order: a policy's size costs a request one map lookup, not a scan.
func (sc *scratch) resolve(c *compiled, r *floodgate.Request, lo, hi int) {
	sc.buf = sc.buf[:0]
	sc.skipped = sc.skipped[:0]
	if lo != 0 || hi != len(c.rules) {
		for i := lo; i < hi; i++ {
			sc.resolveRule(c, r, i)
		}
		return
	}
	ex, ot := c.byMethod[r.Method], c.others
	for len(ex) > 0 || len(ot) > 0 {
		var i int32
		if len(ot) == 0 || len(ex) > 0 && ex[0] < ot[0] {
			i, ex = ex[0], ex[1:]
		} else {
			i, ot = ot[0], ot[1:]
		}
		sc.resolveRule(c, r, int(i))
	}
}

// resolveRule is resolve's work for rule i.
func (sc *scratch) resolveRule(c *compiled, r *floodgate.Request, i int) {
	cr := &c.rules[i]
	if !cr.applies(c, r) { // method, headers, tier
		return
	}
	m := meta{rule: int32(i), start: -1, shadow: cr.shadow, soft: cr.soft}
	cost := cr.cost
	switch {
	case cost != 0:
	case cr.shape.meter != "": // its meter's estimate, else 1; never Request.Cost
		cost = 1
		if sc.est != nil {
			if v, ok := sc.est.Meter(cr.shape.meter); ok && v > 0 {
				cost, m.fromRequest = v, true
			}
		}
	default:
		cost, m.fromRequest = r.Cost, true
		if cost == 0 {
			cost, m.fromRequest = 1, false
		}
	}
	tl := &cr.limit
	known := false
	if cr.byTier {
		if t, ok := c.tiers[r.Tier]; ok {
			tl, known = &t, true
		} else {
			tl = &c.defaultTier
		}
	}
	if len(cr.key) == 0 {
		var k string
		switch {
		case !cr.byTier:
			k = cr.constKey
		case known:
			k = cr.tierKeys[r.Tier]
		default:
			k = cr.defaultKey
		}
		m.shadow = m.shadow || !cr.enforces(nil, r) // the roll-out share (enforce_percent)
		m.multi = tl.more != nil
		sc.metas = append(sc.metas, m)
		sc.addBucket(k, tl.limit, cost, cr)
		if tl.more != nil { // the other windows
			sc.addWindows(tl, m, cost, cr, 0, 0, cr.noKey)
		}
		return
	}
	start := len(sc.buf)
	bodyStart := start + len(cr.prefix)
	sc.buf = append(sc.buf, cr.head...)
	var ok bool
	if sc.buf, ok = sc.kb.appendKeyValues(sc.buf, start, cr, r); !ok {
		sc.skipped = append(sc.skipped, int32(i))
		return
	}
	bodyEnd := len(sc.buf)
	overridden := false
	if cr.overrides != nil {
		if o, has := cr.overrides[string(sc.buf[bodyStart:])]; has {
			tl, overridden = &o, true
		}
	}
	if !overridden && cr.cidrs != nil {
		if o := cr.matchCIDR(r); o != nil {
			tl = o
		}
	}
	m.shadow = m.shadow || !cr.enforces(sc.buf[bodyStart:bodyEnd], r) // the roll-out share (enforce_percent)
	m.multi = tl.more != nil
	sc.buf = append(sc.buf, tl.suffix...)
	m.start, m.end = int32(start), int32(len(sc.buf))
	sc.metas = append(sc.metas, m)
	sc.addBucket("", tl.limit, cost, cr)
	if tl.more != nil { // the other windows
		sc.addWindows(tl, m, cost, cr, start, bodyEnd, "")
	}
}

// addBucket appends a bucket to sc.all field by field: appending a Bucket
// value copies it with a bulk write barrier whenever the GC is marking.
// It writes every field, for release does not clear sc.all: Span and
// Admitted, with pointers and rarely set, only when they are not zero
// (IsZero, as every store reads them), for each such write is a write
// barrier while the GC marks.
func (sc *scratch) addBucket(key string, l quota.Limit, cost int64, cr *cRule) {
	n := len(sc.all)
	if n == cap(sc.all) {
		sc.all = append(sc.all, quota.Bucket{})
	} else {
		sc.all = sc.all[:n+1]
	}
	b := &sc.all[n]
	b.Key = key
	b.Limit = l
	b.Cost = cost
	b.OnStoreError = cr.fail
	b.CacheDenials = cr.cache
	b.Rule = cr.name
	b.Consistency = cr.mode
	b.SyncInterval = cr.sync
	b.MaxWait = cr.shape.maxWait
	b.AtMost = false
	if !b.Admitted.IsZero() {
		b.Admitted = time.Time{}
	}
	switch {
	case cr.cal != nil: // a calendar window: its span and true length
		b.Span = cr.cal.span()
		b.Limit.Period = min(b.Span.End.Sub(b.Span.Start), quota.MaxPeriod)
	case !b.Span.Start.IsZero() || !b.Span.End.IsZero():
		b.Span = quota.Span{}
	}
}

// setKeys sets the keys built in sc.buf into sc.all[from:], with at most
// one allocation for all of them (the store may keep the keys), none when
// the same keys were built recently.
func (sc *scratch) setKeys(from int) {
	if len(sc.buf) == 0 {
		return
	}
	keys := recentKeys.get(sc.buf)
	for i := from; i < len(sc.metas); i++ {
		if m := &sc.metas[i]; m.start >= 0 {
			sc.all[i].Key = keys[m.start:m.end]
		}
	}
}

// skippedNames returns the names of the rules resolve skipped, joined by
// commas. Joined names are interned in recentKeys, so requests that skip
// the same rules share one string instead of allocating one each.
func (sc *scratch) skippedNames(c *compiled) string {
	switch len(sc.skipped) {
	case 0:
		return ""
	case 1:
		return c.rules[sc.skipped[0]].name
	}
	sc.names = sc.names[:0]
	for i, k := range sc.skipped {
		if i > 0 {
			sc.names = append(sc.names, ',')
		}
		sc.names = append(sc.names, c.rules[k].name...)
	}
	return recentKeys.get(sc.names)
}
