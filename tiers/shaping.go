package tiers

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/internal/syntax"
	"github.com/floodgate-go/floodgate/quota"
)

// Settlement and server-side shaping: the rule
// fields settle, max_wait and max_waiters, and what the Limiter does with
// them (see the package doc, "Settlement" and "Waiting").

// shaping is what a compiled rule settles or waits.
type shaping struct {
	settle     bool
	meter      string // Rule.Meter: what the settlement counts; "" the default meter
	maxWait    time.Duration
	maxWaiters int
}

// defaultSettleTimeout bounds a settlement's (or a cancelled wait's
// refund's) store call unless WithSettleTimeout says otherwise.
const defaultSettleTimeout = time.Second

// compileShaping checks and compiles a rule's settle, max_wait and
// max_waiters into cr, reporting problems at rp; it reports whether they
// are usable.
func compileShaping(rep *reporter, rp string, r *Rule, cr *cRule, c *compiled, tierNames []string) bool {
	ok := true
	cr.shape.settle = r.Settle
	if r.Meter != "" {
		if err := syntax.Meter(r.Meter); err != nil {
			rep.add(rp+".meter", err.Error())
			ok = false
		} else if !r.Settle {
			rep.addf(rp+".meter", "%q needs settle: true (a meter is read only when a request's charge is settled; without settle the rule charges its cost at admission and the meter would say nothing)", r.Meter)
			ok = false
		}
		cr.shape.meter = r.Meter
		c.meterEst = c.meterEst || r.Cost == 0
	}
	switch {
	case r.MaxWait < 0:
		rep.addf(rp+".max_wait", "%s is negative", r.MaxWait)
		ok = false
	case r.MaxWait > quota.MaxMaxWait:
		rep.addf(rp+".max_wait", "%s is above %s: a request held that long is better told to come back", r.MaxWait, quota.MaxMaxWait)
		ok = false
	case r.MaxWait > 0 && r.MaxWait < time.Microsecond:
		rep.addf(rp+".max_wait", "%s is below 1µs, the stores' resolution", r.MaxWait)
		ok = false
	case r.MaxWait > 0:
		cr.shape.maxWait = r.MaxWait.Truncate(time.Microsecond)
	}
	if r.MaxWait > 0 {
		if r.Consistency == quota.Leased {
			rep.add(rp+".max_wait", "is not for consistency leased: a lease spends units as soon as it holds them, and units booked ahead are not there yet (use exact or async)")
			ok = false
		}
		if r.Rate.Tier {
			for _, n := range tierNames {
				if t, has := c.tiers[n]; has && !t.limit.Algorithm.CanBookAhead() {
					rep.addf(rp+".max_wait", "needs token_bucket or gcra (they book units ahead), but tier %q uses %s", n, t.limit.Algorithm)
					ok = false
				}
			}
		} else if !r.Algorithm.CanBookAhead() {
			rep.addf(rp+".max_wait", "needs token_bucket or gcra (they book units ahead; a window's count cannot), not %s", r.Algorithm)
			ok = false
		}
	}
	switch {
	case r.MaxWaiters == 0:
		cr.shape.maxWaiters = DefaultMaxWaiters
	case r.MaxWait <= 0:
		rep.add(rp+".max_waiters", "is only for rules with max_wait")
		ok = false
	case r.MaxWaiters < 1 || r.MaxWaiters > MaxMaxWaiters:
		rep.addf(rp+".max_waiters", "%d is out of range [1, %d]", r.MaxWaiters, MaxMaxWaiters)
		ok = false
	default:
		cr.shape.maxWaiters = r.MaxWaiters
	}
	if ok && (cr.shape.settle || cr.shape.maxWait > 0) {
		c.shaping = true
	}
	return ok
}

// shaping decodes a rule's settle, meter, max_wait and max_waiters
// fields.
func (d *decoder) shaping(key string, v *yaml.Node, fp string, r *Rule) {
	switch key {
	case "settle":
		r.Settle = d.boolean(v, fp)
	case "max_wait":
		if s, ok := d.str(v, fp); ok {
			w, err := time.ParseDuration(s)
			if err != nil || w <= 0 {
				d.fail(fp, v, "%q is not a positive duration such as 250ms", s)
			} else {
				r.MaxWait = w
			}
		}
	case "meter":
		if s, ok := d.str(v, fp); ok {
			if strings.TrimSpace(s) == "" {
				d.fail(fp, v, "is empty: leave meter out for the default meter")
			} else {
				r.Meter = s // its spelling is checked with the rule
			}
		}
	case "max_waiters":
		n, _ := d.integer(v, fp)
		r.MaxWaiters = int(min(n, MaxMaxWaiters+1)) // the range is checked with the rule
	}
}

// shaperConfig is what the Limiter options of this file set.
type shaperConfig struct {
	clock         floodgate.Clock
	settleTimeout time.Duration
}

// WithClock sets the clock a Limiter times waits on (rules with
// max_wait; default floodgate.SystemClock()). A clock with an
// After(time.Duration) <-chan time.Time method (package testing/clock's
// fake has one) is waited on through it, so tests of waiting run on fake
// time; any other is waited on with a real timer. Contexts' deadlines are
// always real time.
func WithClock(clk floodgate.Clock) Option {
	return func(c *limiterConfig) {
		if clk == nil {
			c.errs = append(c.errs, errors.New("tiers: WithClock: clock is nil"))
			return
		}
		c.sh.clock = clk
	}
}

// WithSettleTimeout bounds each store call that settles a request's cost
// (rules with settle) or gives back the units of a cancelled wait
// (1s unless given; positive).
func WithSettleTimeout(d time.Duration) Option {
	return func(c *limiterConfig) {
		if d <= 0 {
			c.errs = append(c.errs, fmt.Errorf("tiers: WithSettleTimeout: %s is not positive", d))
			return
		}
		c.sh.settleTimeout = d
	}
}

// afterClock is a Clock that can time a wait itself (package
// testing/clock's fake).
type afterClock interface {
	After(d time.Duration) <-chan time.Time
}

// shaper is the Limiter's part for settlement and waiting.
type shaper struct {
	settler quota.Settler // nil when the store cannot settle
	clock   floodgate.Clock
	timeout time.Duration

	mu      sync.Mutex
	waiting map[string]int // bucket key -> requests waiting on it here
	// nwaiting is the sum of waiting: while no request waits, a take
	// reads it instead of locking mu.
	nwaiting atomic.Int64

	settled, failed, givenBack, waited atomic.Uint64
	lastLog                            atomic.Int64
}

func (s *shaper) init(store quota.Store, cfg shaperConfig) {
	if quota.Settles(store) {
		s.settler = store.(quota.Settler)
	}
	s.clock, s.timeout = cfg.clock, cfg.settleTimeout
	if s.clock == nil {
		s.clock = floodgate.SystemClock()
	}
	if s.timeout == 0 {
		s.timeout = defaultSettleTimeout
	}
	s.waiting = make(map[string]int)
}

// check refuses a policy with rules that settle or wait over a store that
// cannot settle, naming each such rule.
func (s *shaper) check(c *compiled) error {
	if !c.shaping || s.settler != nil {
		return nil
	}
	rep := &reporter{}
	for i := range c.rules {
		cr := &c.rules[i]
		rp := "rules[" + strconv.Itoa(cr.index) + "]"
		if cr.shape.settle {
			rep.add(rp+".settle", "the store cannot settle (it is not a quota.Settler, or what it wraps is not); every store of this module is")
		}
		if cr.shape.maxWait > 0 {
			rep.add(rp+".max_wait", "the store cannot give back a cancelled wait's units (it is not a quota.Settler, or what it wraps is not); every store of this module is")
		}
	}
	return rep.err()
}

// settleStats counts what a Limiter settled.
type settleStats struct {
	// Settled counts settlements sent to the store (rules with settle,
	// requests that ended with a cost other than their estimate) that it
	// applied; Failed those it did not (the store's error was logged; the
	// charge made at admission stands, for that store call's buckets).
	Settled, Failed uint64
	// GivenBack counts requests whose booked units were given back: their
	// wait was cut short (context ended) or the waiter cap was reached.
	GivenBack uint64
	// Waited counts requests that waited for their units and proceeded.
	Waited uint64
}

// settleStats returns the Limiter's settlement and waiting counters.
func (l *Limiter) settleStats() settleStats {
	return settleStats{Settled: l.sh.settled.Load(), Failed: l.sh.failed.Load(), GivenBack: l.sh.givenBack.Load(), Waited: l.sh.waited.Load()}
}

// waiting returns how many requests are waiting on the bucket key now in
// this process (rules with max_wait).
func (l *Limiter) waiting(key string) int {
	l.sh.mu.Lock()
	defer l.sh.mu.Unlock()
	return l.sh.waiting[key]
}

// charges is what the takes of one Admit charged, kept when a rule of the
// policy settles or waits: the buckets as charged, what the store said of
// each, which settle, and the longest wait the real take booked.
type charges struct {
	buckets []quota.Bucket
	took    []quota.Result
	settles []bool
	meters  []string // each bucket's rule's meter ("" the default)
	// wait is the longest Result.Wait of the real take; waitKeys are the
	// keys that booked one, with their rules' waiter caps.
	wait     time.Duration
	waitKeys []string
	waitCaps []int
	nsettle  int
}

func (ch *charges) reset() {
	clear(ch.buckets)
	clear(ch.waitKeys)
	clear(ch.meters)
	ch.buckets, ch.took, ch.settles, ch.meters = ch.buckets[:0], ch.took[:0], ch.settles[:0], ch.meters[:0]
	ch.waitKeys, ch.waitCaps = ch.waitKeys[:0], ch.waitCaps[:0]
	ch.wait, ch.nsettle = 0, 0
}

func (ch *charges) any() bool { return len(ch.buckets) > 0 }

// note records a take that charged: bs (whose indices in sc.all are idx,
// nil: the identity) and their results, when anything will need them: a
// bucket that settles, or a wait (whose cancellation gives back what every
// take of the request charged). A shadow take's waits are booked but
// never waited for.
func (ch *charges) note(c *compiled, sc *scratch, bs []quota.Bucket, idx []int32, res []quota.Result, shadow bool) {
	need := ch.wait > 0
	for i := 0; i < len(bs) && !need; i++ {
		k := i
		if idx != nil {
			k = int(idx[i])
		}
		need = c.rules[sc.metas[k].rule].shape.settle || !shadow && res[i].Wait > 0
	}
	if !need {
		return
	}
	for i := range bs {
		k := i
		if idx != nil {
			k = int(idx[i])
		}
		cr := &c.rules[sc.metas[k].rule]
		ch.buckets = append(ch.buckets, bs[i])
		ch.took = append(ch.took, res[i])
		ch.settles = append(ch.settles, cr.shape.settle)
		ch.meters = append(ch.meters, cr.shape.meter)
		if cr.shape.settle {
			ch.nsettle++
		}
		if w := res[i].Wait; w > 0 && !shadow {
			ch.wait = max(ch.wait, w)
			ch.waitKeys = append(ch.waitKeys, bs[i].Key)
			ch.waitCaps = append(ch.waitCaps, cr.shape.maxWaiters)
		}
	}
}

// bookAhead sets the MaxWait of the buckets about to be taken for the
// request: no longer than its context's deadline leaves, and 0 (no wait)
// on a bucket that already has its rule's cap of requests waiting here.
func (l *Limiter) bookAhead(ctx context.Context, c *compiled, sc *scratch, bs []quota.Bucket, idx []int32) {
	left := time.Duration(-1)
	if dl, ok := ctx.Deadline(); ok {
		left = max(0, time.Until(dl).Truncate(time.Microsecond))
	}
	for i := range bs {
		b := &bs[i]
		if b.MaxWait == 0 {
			continue
		}
		if left >= 0 && left < b.MaxWait {
			b.MaxWait = left
		}
		if l.sh.nwaiting.Load() == 0 {
			continue // nobody waits: no cap is reached
		}
		k := i
		if idx != nil {
			k = int(idx[i])
		}
		limit := c.rules[sc.metas[k].rule].shape.maxWaiters
		l.sh.mu.Lock()
		full := l.sh.waiting[b.Key] >= limit
		l.sh.mu.Unlock()
		if full {
			b.MaxWait = 0
		}
	}
}

// enter counts the request as waiting on each of keys, unless one of them
// already has its cap (caps[i]) waiting: then it counts nothing and
// reports false.
func (s *shaper) enter(keys []string, caps []int) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	for i, k := range keys {
		if s.waiting[k] >= caps[i] {
			return false
		}
	}
	for _, k := range keys {
		s.waiting[k]++
	}
	s.nwaiting.Add(int64(len(keys)))
	return true
}

func (s *shaper) leave(keys []string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.nwaiting.Add(-int64(len(keys)))
	for _, k := range keys {
		if s.waiting[k] <= 1 {
			delete(s.waiting, k)
		} else {
			s.waiting[k]--
		}
	}
}

// sleep waits d on the Limiter's clock, or until ctx ends; it returns how
// long it waited.
func (s *shaper) sleep(ctx context.Context, d time.Duration) (time.Duration, error) {
	start := s.clock.Now()
	var (
		ch    <-chan time.Time
		timer *time.Timer
	)
	if a, ok := s.clock.(afterClock); ok {
		ch = a.After(d)
	} else {
		timer = time.NewTimer(d)
		ch = timer.C
	}
	select {
	case <-ch:
		return d, nil
	case <-ctx.Done():
		if timer != nil {
			timer.Stop()
		}
		return min(d, max(0, s.clock.Now().Sub(start))), ctx.Err()
	}
}

// shape finishes an Admit whose takes charged while a rule of the policy
// settles or waits: the request waits for the units its real take booked
// ahead (giving them back if the wait is cut short or the waiter cap is
// reached), and gets a Done that settles its settling rules' charge.
func (l *Limiter) shape(ctx context.Context, sc *scratch, d floodgate.Decision, err error) (floodgate.Decision, floodgate.Done, error) {
	ch := &sc.charged
	if ch.wait > 0 {
		if !l.sh.enter(ch.waitKeys, ch.waitCaps) {
			// Other requests took the last places while this one was
			// being decided: give its units back and deny, as a wait
			// beyond the cap is.
			l.giveBack(ctx, ch)
			d.Allowed, d.RetryAfter = false, ch.wait
			return d, nil, err
		}
		waited, werr := l.sh.sleep(ctx, ch.wait)
		l.sh.leave(ch.waitKeys)
		d.Waited = waited
		if werr != nil {
			l.giveBack(ctx, ch)
			d.Allowed, d.RetryAfter = false, ch.wait-waited
			return d, nil, errors.Join(err, fmt.Errorf("tiers: the request's wait of %s for its units was cut short after %s; they were given back: %w", ch.wait, waited, werr))
		}
		l.sh.waited.Add(1)
	}
	if ch.nsettle == 0 {
		return d, nil, err
	}
	return d, l.newSettlement(ctx, ch).finish, err
}

// giveBack refunds everything the request's takes charged.
func (l *Limiter) giveBack(ctx context.Context, ch *charges) {
	for i := range ch.buckets {
		ch.buckets[i].Cost = -ch.buckets[i].Cost
	}
	l.sh.givenBack.Add(1)
	l.settle(ctx, ch.buckets, ch.took)
}

// settle sends one settlement to the store, bounded by the settle
// timeout, and counts and logs (at most once a second) a failure.
func (l *Limiter) settle(ctx context.Context, bs []quota.Bucket, took []quota.Result) {
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), l.sh.timeout)
	err := l.sh.settler.Settle(sctx, bs, took)
	cancel()
	if err == nil {
		l.sh.settled.Add(1)
		return
	}
	l.sh.failed.Add(1)
	now := time.Now().UnixNano()
	if prev := l.sh.lastLog.Load(); (prev == 0 || now-prev >= int64(time.Second)) && l.sh.lastLog.CompareAndSwap(prev, now) {
		slog.Warn("floodgate: settling a request's cost with the store failed; the charge made at admission stands", "rule", bs[0].Rule, "error", err.Error())
	}
}

// settlement is the Done of a request with rules that settle: their
// buckets as charged (Cost the estimate), what the store said of each, and
// the meter each counts.
type settlement struct {
	l    *Limiter
	ctx  context.Context
	bs   []quota.Bucket
	est  []int64
	took []quota.Result
	// meters are the buckets' meters, nil when every one counts the
	// default meter: a pointer, so that a settlement of a policy without
	// meters stays in its allocation size class.
	meters *meterList
	once   atomic.Bool
	// inline room for the common one or two settling rules
	bbuf [2]quota.Bucket
	ebuf [2]int64
	tbuf [2]quota.Result
}

func (l *Limiter) newSettlement(ctx context.Context, ch *charges) *settlement {
	s := &settlement{l: l, ctx: context.WithoutCancel(ctx)}
	s.bs, s.est, s.took = s.bbuf[:0], s.ebuf[:0], s.tbuf[:0]
	named := false
	for i := range ch.buckets {
		if !ch.settles[i] {
			continue
		}
		s.bs = append(s.bs, ch.buckets[i])
		s.est = append(s.est, ch.buckets[i].Cost)
		s.took = append(s.took, ch.took[i])
		named = named || ch.meters[i] != ""
	}
	if named { // only a policy with meters pays for them
		ml := &meterList{}
		ml.names = ml.buf[:0]
		for i := range ch.buckets {
			if ch.settles[i] {
				ml.names = append(ml.names, ch.meters[i])
			}
		}
		s.meters = ml
	}
	return s
}

// meter is the meter bucket i counts; "" the default one.
func (s *settlement) meter(i int) string {
	if s.meters == nil {
		return ""
	}
	return s.meters.names[i]
}

// meterList is a settlement's meters, with inline room for the common
// one or two settling rules.
type meterList struct {
	names []string
	buf   [2]string
}

// finish settles, every bucket in one store call: each is charged the
// difference between its estimate and the actual value of its meter, or
// refunded it: the default meter's is res.Cost (when res.HasCost), a named
// meter's what res.Meters has of it. A bucket whose meter has no actual
// value keeps its charge. floodgate.Ignored (a later stage denied the
// request) refunds every bucket its whole charge, whatever its meter.
// Called more than once, it settles once.
func (s *settlement) finish(res floodgate.Result) {
	if !s.once.CompareAndSwap(false, true) {
		return
	}
	// floodgate.Ignored, compared field by field: Meters may hold a value
	// == cannot compare.
	ignored := res.Outcome == floodgate.OutcomeIgnored && res.HasCost && res.Cost == 0 && res.Meters == nil
	n := 0 // the buckets to settle, moved to the front
	for i := range s.bs {
		actual, ok := res.Cost, res.HasCost
		if m := s.meter(i); m != "" && !ignored {
			actual, ok = 0, false
			if res.Meters != nil {
				actual, ok = res.Meters.Meter(m)
			}
		}
		if !ok || actual == s.est[i] {
			continue
		}
		b, t := s.bs[i], s.took[i]
		b.Cost = actual - s.est[i]
		s.bs[n], s.took[n] = b, t
		n++
	}
	if n > 0 {
		s.l.settle(s.ctx, s.bs[:n], s.took[:n])
	}
}
