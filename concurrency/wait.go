package concurrency

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/internal/fair"
	"github.com/floodgate-go/floodgate/internal/field"
)

// WaitOrder is which of the requests of one priority waiting for a slot
// gets the next one that frees.
type WaitOrder uint8

// Wait orders.
const (
	// FIFO (the default) gives a freed slot to the request that has
	// waited longest: fair, but under sustained overload every request
	// waits about the whole bound before it runs or is denied.
	FIFO WaitOrder = iota
	// LIFO gives a freed slot to the request that arrived last: under
	// sustained overload the requests that do run waited little, and the
	// ones that waited longest are those denied when their wait ends
	// (Netflix concurrency-limits' LIFO blocking limiter).
	LIFO
	// CoDel is FIFO while the queue drains, and LIFO with waits cut to
	// Wait.Target once it stands: once it has not emptied for
	// Wait.Interval (the controlled delay of Facebook's request queues,
	// after CoDel, RFC 8289, with their adaptive LIFO), until it empties.
	// Under sustained overload the requests that run waited little, and
	// the rest are refused after Target rather than Max; a burst the
	// service absorbs within Interval is served in order.
	CoDel
)

var orderNames = [...]string{"fifo", "lifo", "codel"}

// String returns "fifo", "lifo" or "codel".
func (o WaitOrder) String() string {
	if int(o) < len(orderNames) {
		return orderNames[o]
	}
	return fmt.Sprintf("order(%d)", uint8(o))
}

// UnmarshalText sets o from its name as written by String; case and
// surrounding spaces are ignored.
func (o *WaitOrder) UnmarshalText(text []byte) error {
	t := strings.ToLower(strings.TrimSpace(string(text)))
	for i, n := range orderNames {
		if n == t {
			*o = WaitOrder(i)
			return nil
		}
	}
	return fmt.Errorf("concurrency: unknown wait order %q (want fifo, lifo or codel)", string(text))
}

// Wait is how long a request may wait for a slot instead of being denied
// at once (WithWait, AdaptiveConfig.Wait, Limiter.SetWait). The zero
// value waits not at all. See the package documentation ("Waiting for a
// slot").
type Wait struct {
	// Max is the longest a request waits for a slot; 0 means it does not
	// wait (a full cap denies at once). It must not be negative.
	Max time.Duration
	// Queue is the most requests waiting at once; 0 means DefaultQueue. It
	// must not be negative. When it is full, a request of a higher
	// priority than the least important waiting one takes that one's
	// place (which is denied at once); any other is denied at once.
	Queue int
	// Order is which request of one priority a freed slot goes to; the
	// zero value is FIFO.
	Order WaitOrder
	// Target is, with Order CoDel, the wait a standing queue is cut to; 0
	// means DefaultWaitTarget (or Max, when shorter). It must not be
	// negative, nor above Max.
	Target time.Duration
	// Interval is, with Order CoDel, how long the queue must stay
	// non-empty to stand; 0 means DefaultWaitInterval. It must not be
	// negative.
	Interval time.Duration
	// Fairness, when not nil, gives a freed slot to the waiting request
	// of its priority whose caller (floodgate.Fairness.By) holds the
	// fewest slots for its weight, FIFO or LIFO among equals, and, when
	// the queue is full, refuses the waiting request whose caller holds
	// the most: one caller's surge waits behind the others' requests
	// instead of ahead of them. It costs a look at every waiting request
	// of a priority per freed slot.
	Fairness *floodgate.Fairness
}

// withDefaults returns w with Queue set when it waits, and Target and
// Interval under CoDel.
func (w Wait) withDefaults() Wait {
	if w.Max > 0 && w.Queue == 0 {
		w.Queue = DefaultQueue
	}
	if w.Order == CoDel {
		if w.Target == 0 {
			w.Target = min(DefaultWaitTarget, w.Max)
		}
		if w.Interval == 0 {
			w.Interval = DefaultWaitInterval
		}
	}
	return w
}

// fieldErrors reports w's bad fields by their policy file keys, under
// parent ("wait.max") unless parent is "".
func (w Wait) fieldErrors(parent string) []*field.Error {
	var errs []*field.Error
	add := func(e *field.Error) {
		if parent != "" {
			e = e.Under(parent)
		}
		errs = append(errs, e)
	}
	if w.Max < 0 {
		add(field.Errorf("max", "%s is negative", w.Max))
	}
	if w.Queue < 0 {
		add(field.Errorf("queue", "%d is negative", w.Queue))
	}
	if int(w.Order) >= len(orderNames) {
		add(field.Errorf("order", "%d is not a known order (FIFO, LIFO, CoDel)", uint8(w.Order)))
	}
	if w.Target < 0 {
		add(field.Errorf("target", "%s is negative", w.Target))
	} else if w.Max >= 0 && w.Target > w.Max {
		add(field.Errorf("target", "%s is above max %s: a standing queue would wait longer than any other", w.Target, w.Max))
	}
	if w.Interval < 0 {
		add(field.Errorf("interval", "%s is negative", w.Interval))
	}
	if w.Fairness != nil {
		for _, e := range fair.FieldErrors(w.Fairness) {
			add(e.Under("fairness"))
		}
	}
	return errs
}

// Validate reports every bad field of w by its key in the policy file
// ("concurrency: Wait: max: -1s is negative"), or nil.
func (w Wait) Validate() error {
	var errs []error
	for _, e := range w.fieldErrors("") {
		errs = append(errs, fmt.Errorf("concurrency: Wait: %w", e))
	}
	return errors.Join(errs...)
}

// tryFunc makes one attempt to admit r without waiting. A deny with an
// error is final (the request does not wait). all says that the deny
// would refuse any other request as well (a global or adaptive cap is
// full), so a scan of the waiting requests stops there.
type tryFunc func(r *floodgate.Request) (d floodgate.Decision, done floodgate.Done, all bool, err error)

// waiters holds the requests waiting for a slot of one limiter, by
// priority, each priority a list in arrival order.
type waiters struct {
	cfg   atomic.Pointer[Wait] // defaults applied; Max 0: no waiting
	fair  fair.InForce         // Wait.Fairness
	clock floodgate.Clock
	try   tryFunc
	n     atomic.Int64 // requests queued
	// waited counts the requests admitted with a slot that another
	// request's release handed them while they waited (tests read it).
	waited atomic.Int64
	// gap is the mean interval between two slots freed while requests
	// waited, held the mean time a request handed a slot from the queue
	// held it (ns, moving averages over about the last 8; 0 until
	// measured): the queue's pace, which a request's deadline is held to
	// (see wait).
	gap, held atomic.Int64
	// late counts the requests refused at once because the queue's pace
	// would hand them a slot too late for their deadline (tests read it).
	late atomic.Int64

	mu    sync.Mutex
	lists [floodgate.NumPriorities]waitList // by rank; guarded by mu
	count [floodgate.NumPriorities]int      // waiters by rank; guarded by mu
	// lastFree is when a slot last freed while requests waited (ns on the
	// clock; 0: none since the queue was last empty). Guarded by mu.
	lastFree int64
	// busySince is when the queue last became non-empty (ns on the
	// clock; 0 while empty): under CoDel it stands once that is Interval
	// ago. Guarded by mu.
	busySince int64
	// scans numbers the scans under fairness, and pushes the requests
	// queued. Guarded by mu.
	scans, pushes uint64
	// callers are, under fairness, the waiters of each rank by caller,
	// each caller's in the rank's order (linked by cprev, cnext): a scan
	// looks at each caller's first, not at every waiter. Guarded by mu.
	callers [floodgate.NumPriorities]map[fair.Key]*waitList
}

// waitList is a doubly linked list of waiters, oldest at head: a rank's
// (linked by each waiter's byRank) or one caller's of a rank (byCaller).
type waitList struct{ head, tail *waiter }

// link is a waiter's place in one waitList.
type link struct{ prev, next *waiter }

// byRank and byCaller pick the link of a waiter's rank's list and of its
// caller's list.
func byRank(w *waiter) *link   { return &w.rankLink }
func byCaller(w *waiter) *link { return &w.callerLink }

// waiter is one request waiting for a slot.
type waiter struct {
	r          *floodgate.Request
	rank       int
	at         int64         // when it joined the queue (ns on the clock)
	rankLink   link          // in its rank's list
	queued     bool          // in a list; guarded by waiters.mu
	handed     bool          // granted by another request's scan, not its own; set before ch receives
	tried      uint64        // the scan (waiters.scans) that last tried it, under fairness
	fs         *fair.Share   // the Share counting it while it waits; nil: none
	ck         fair.Key      // its caller, with fs
	seq        uint64        // its place in arrival order (waiters.pushes)
	callerLink link          // in its caller's list of its rank, with fs (waiters.callers)
	ch         chan struct{} // receives once the waiter is granted or evicted
	d          floodgate.Decision
	done       floodgate.Done
}

func (q *waiters) init(w Wait, clock floodgate.Clock, try tryFunc) {
	q.clock, q.try = clock, try
	q.set(w)
}

func (q *waiters) set(w Wait) {
	w = w.withDefaults()
	w.Fairness = fair.Copy(w.Fairness)
	if !q.fair.Same(w.Fairness) {
		q.mu.Lock()
		q.refair(w.Fairness)
		q.mu.Unlock()
	}
	q.cfg.Store(&w)
}

// refair puts f in force and moves the waiting requests to its counts
// and callers' lists; mu is held.
func (q *waiters) refair(f *floodgate.Fairness) {
	var all []*waiter
	for rk := range q.lists {
		for w := q.lists[rk].head; w != nil; w = w.rankLink.next {
			all = append(all, w)
		}
	}
	for _, w := range all {
		q.unfair(w)
	}
	q.fair.Set(f)
	for _, w := range all {
		q.enfair(w)
	}
}

// enfair counts w, which is queued, among its caller's under the Share
// in force, at the end of its caller's list of its rank; mu is held.
func (q *waiters) enfair(w *waiter) {
	fs := q.fair.Share()
	if fs == nil {
		return
	}
	w.fs, w.ck = fs, fs.Caller(w.r)
	fs.Queue(w.r, 1)
	m := q.callers[w.rank]
	if m == nil {
		m = map[fair.Key]*waitList{}
		q.callers[w.rank] = m
	}
	cl := m[w.ck]
	if cl == nil {
		cl = &waitList{}
		m[w.ck] = cl
	}
	cl.pushBack(w, byCaller)
}

// unfair undoes enfair; mu is held.
func (q *waiters) unfair(w *waiter) {
	if w.fs == nil {
		return
	}
	w.fs.Queue(w.r, -1)
	m := q.callers[w.rank]
	cl := m[w.ck]
	cl.unlink(w, byCaller)
	if cl.head == nil {
		delete(m, w.ck)
	}
	w.fs, w.ck = nil, fair.Key{}
}

// requireScopes is the RequireScopes of the limiter that waits on q.
func (q *waiters) requireScopes(resolvable []string, strict bool) error {
	if err := q.fair.Require(resolvable, strict); err != nil {
		return fmt.Errorf("concurrency: wait.fairness.%w", err)
	}
	return nil
}

// checkScopes reports a w whose Fairness keys on an identity the
// transport never fills.
func (q *waiters) checkScopes(w Wait) error {
	if e := q.fair.Check(w.Fairness); e != nil {
		return fmt.Errorf("concurrency: Wait: %w", e.Under("fairness"))
	}
	return nil
}

// hold counts a request admitted with done among its caller's, under
// fairness (done itself otherwise).
func (q *waiters) hold(r *floodgate.Request, done floodgate.Done) floodgate.Done {
	if done == nil {
		return nil
	}
	return q.fair.Share().Hold(r, done)
}

// enabled reports whether a denied request waits.
func (q *waiters) enabled() bool { return q.cfg.Load().Max > 0 }

// rank is where a priority waits: unspecified ranks as write, as the
// shedder takes it by default.
func rank(p floodgate.Priority) int {
	if p == floodgate.PriorityUnspecified || !p.Valid() {
		return int(floodgate.PriorityWrite)
	}
	return int(p)
}

// wake admits waiting requests a freed slot now lets in, if any wait.
func (q *waiters) wake() {
	if q.n.Load() == 0 {
		return
	}
	q.mu.Lock()
	q.scan(nil)
	q.mu.Unlock()
}

// freed is wake for a slot a request released: while requests wait, it
// also times the queue's pace (gap).
func (q *waiters) freed() {
	if q.n.Load() == 0 {
		return
	}
	q.mu.Lock()
	now := q.clock.Now().UnixNano()
	if q.lastFree != 0 && now > q.lastFree {
		average(&q.gap, now-q.lastFree)
	}
	q.lastFree = now
	q.scan(nil)
	q.mu.Unlock()
}

// average moves the moving average at a 1/8 of the way to x (x itself
// when a holds none yet).
func average(a *atomic.Int64, x int64) {
	old := a.Load()
	if old == 0 {
		a.Store(x)
		return
	}
	a.Store(old + (x-old)/8)
}

// timed wraps the Done of a request handed a slot at now from the
// queue, to time how long it holds it (held).
func (q *waiters) timed(done floodgate.Done, now int64) floodgate.Done {
	return func(res floodgate.Result) {
		average(&q.held, q.clock.Now().UnixNano()-now)
		done(res)
	}
}

// ahead returns how many waiting requests a freed slot would reach
// before one of rank rk that joins now: those of a higher priority, and
// under FIFO those of its own. mu is held.
func (q *waiters) ahead(rk int, lifo bool) int {
	n := 0
	for r := rk + 1; r < len(q.count); r++ {
		n += q.count[r]
	}
	if !lifo {
		n += q.count[rk]
	}
	return n
}

// scan tries the waiting requests in the order a freed slot goes to them
// (priority, then FIFO or LIFO) and hands a slot to each that now fits;
// it stops at a deny that refuses every request. self, when not nil, is
// the request that just joined: when the scan stops before trying it, it
// takes the deny that stopped the scan. mu is held.
func (q *waiters) scan(self *waiter) {
	cfg := q.cfg.Load()
	now := int64(0)
	if cfg.Order == CoDel {
		now = q.clock.Now().UnixNano()
	}
	lifo := q.lifo(cfg, now)
	fs := q.fair.Share()
	if fs != nil {
		q.scans++
	}
	for rk := len(q.lists) - 1; rk >= 0; rk-- {
		w := q.firstOf(fs, rk, lifo)
		for w != nil {
			var next *waiter // under fairness, chosen after w's try moved the loads
			if fs == nil {
				next = after(w, lifo, byRank)
			}
			d, done, all, err := q.try(w.r)
			if d.Allowed || err != nil {
				q.remove(w)
				w.d, w.done, w.handed = d, q.hold(w.r, done), w != self
				if w.handed && done != nil {
					if now == 0 {
						now = q.clock.Now().UnixNano()
					}
					w.done = q.timed(w.done, now)
				}
				w.ch <- struct{}{}
			} else {
				w.d = d
				if all {
					if self != nil && self.queued && self != w {
						self.d = d
						self.d.Priority = self.r.Priority
					}
					return
				}
			}
			if fs != nil {
				next = q.firstOf(fs, rk, lifo)
			}
			w = next
		}
	}
}

// firstOf is the waiter of rank rk a scan tries first: the list's first,
// or under fairness, among each caller's first untried waiter, the one
// whose caller's load is least (the rank's order among equals). mu is
// held.
func (q *waiters) firstOf(fs *fair.Share, rk int, lifo bool) *waiter {
	if fs == nil {
		return q.lists[rk].first(lifo)
	}
	var best *waiter
	load := 0.0
	for _, cl := range q.callers[rk] {
		w := cl.first(lifo)
		for w != nil && w.tried == q.scans {
			w = after(w, lifo, byCaller)
		}
		if w == nil {
			continue
		}
		l := fs.Load(w.r)
		if best == nil || l < load || (l == load && (w.seq < best.seq) != lifo) {
			best, load = w, l
		}
	}
	if best != nil {
		best.tried = q.scans
	}
	return best
}

func (l *waitList) first(lifo bool) *waiter {
	if lifo {
		return l.tail
	}
	return l.head
}

// after is the waiter a scan in order lifo reaches after w in the list
// at links.
func after(w *waiter, lifo bool, at func(*waiter) *link) *waiter {
	if lifo {
		return at(w).prev
	}
	return at(w).next
}

// pushBack appends w to l through its link at.
func (l *waitList) pushBack(w *waiter, at func(*waiter) *link) {
	*at(w) = link{prev: l.tail}
	if l.tail != nil {
		at(l.tail).next = w
	} else {
		l.head = w
	}
	l.tail = w
}

// unlink takes w out of l through its link at.
func (l *waitList) unlink(w *waiter, at func(*waiter) *link) {
	k := at(w)
	if k.prev != nil {
		at(k.prev).next = k.next
	} else {
		l.head = k.next
	}
	if k.next != nil {
		at(k.next).prev = k.prev
	} else {
		l.tail = k.prev
	}
	*k = link{}
}

// lifo reports whether a freed slot goes to the newest waiting request
// of a priority at now: under LIFO, and under CoDel while the queue
// stands. mu is held.
func (q *waiters) lifo(cfg *Wait, now int64) bool {
	return cfg.Order == LIFO || q.standing(cfg, now)
}

// standing reports whether, under CoDel, the queue stands at now: it has
// not emptied for Interval. mu is held.
func (q *waiters) standing(cfg *Wait, now int64) bool {
	return cfg.Order == CoDel && q.busySince != 0 && now-q.busySince >= int64(cfg.Interval)
}

// push appends w (mu held).
func (q *waiters) push(w *waiter) {
	if q.n.Load() == 0 {
		q.busySince = max(w.at, 1)
	}
	q.count[w.rank]++
	q.lists[w.rank].pushBack(w, byRank)
	w.queued = true
	q.pushes++
	w.seq = q.pushes
	q.enfair(w)
	q.n.Add(1)
}

// remove unlinks w (mu held).
func (q *waiters) remove(w *waiter) {
	q.lists[w.rank].unlink(w, byRank)
	w.queued = false
	q.unfair(w)
	q.count[w.rank]--
	if q.n.Add(-1) == 0 {
		// Empty: the pace starts anew, and a standing queue has drained.
		q.lastFree, q.busySince = 0, 0
	}
}

// last returns the waiter a freed slot would reach last: the lowest
// priority's newest (FIFO) or oldest (LIFO). mu is held.
func (q *waiters) last(lifo bool) *waiter {
	for rk := range q.lists {
		if w := q.lists[rk].first(!lifo); w != nil {
			return w
		}
	}
	return nil
}

// heaviest returns the waiter of rank rk whose caller's load is the
// greatest: that caller's waiter a freed slot would reach last, and among
// callers of equal load the one reached last. mu is held.
func (q *waiters) heaviest(fs *fair.Share, rk int, lifo bool) *waiter {
	var worst *waiter
	load := 0.0
	for _, cl := range q.callers[rk] {
		w := cl.first(!lifo)
		l := fs.Load(w.r)
		if worst == nil || l > load || (l == load && (w.seq > worst.seq) != lifo) {
			worst, load = w, l
		}
	}
	return worst
}

// wait holds r, which found no slot (denied is that deny, or nil when r
// joined the queue without trying because others wait), until a slot is
// handed to it, cfg.Max passes, it is evicted from a full queue, or ctx
// ends.
func (q *waiters) wait(ctx context.Context, r *floodgate.Request, denied *floodgate.Decision) (floodgate.Decision, floodgate.Done, error) {
	cfg := q.cfg.Load()
	if err := ctx.Err(); err != nil {
		q.wake() // r may have held a slot for a moment while trying
		return q.gone(r, denied, err)
	}
	w := &waiter{r: r, rank: rank(r.Priority), ch: make(chan struct{}, 1)}
	if denied != nil {
		w.d = *denied
	}
	q.mu.Lock()
	now := q.clock.Now().UnixNano()
	w.at = now
	lifo := q.lifo(cfg, now)
	maxWait := cfg.Max
	if q.standing(cfg, now) {
		maxWait = cfg.Target
	}
	q.push(w)
	q.scan(w)
	if w.queued && q.tooLate(ctx, w, now, lifo) {
		// Its deadline comes before the queue's pace would hand it a
		// slot and let it run: refused at once, as without waiting.
		q.remove(w)
		q.late.Add(1)
		q.mu.Unlock()
		return w.d, nil, nil
	}
	if w.queued && int(q.n.Load()) > cfg.Queue {
		// Full: r takes the place of the waiter a slot would reach last
		// if r outranks it, and is refused otherwise.
		evict := q.last(lifo)
		if fs := q.fair.Share(); fs != nil {
			evict = q.heaviest(fs, evict.rank, lifo) // of the lowest rank: w's, or below it
		} else if evict.rank >= w.rank {
			evict = w
		}
		q.remove(evict)
		evict.ch <- struct{}{}
	}
	q.mu.Unlock()
	select {
	case <-w.ch:
		return q.granted(w)
	default:
	}
	timer, stop := q.after(maxWait)
	defer stop()
	var ended error
	select {
	case <-w.ch:
		return q.granted(w)
	case <-timer:
	case <-ctx.Done():
		ended = ctx.Err()
	}
	q.mu.Lock()
	if w.queued {
		q.remove(w)
		q.mu.Unlock()
		if ended != nil {
			return q.gone(r, &w.d, ended)
		}
		return w.d, nil, nil
	}
	q.mu.Unlock()
	<-w.ch // granted (or evicted) as the wait ended
	if ended != nil && w.done != nil {
		w.done(floodgate.Result{Outcome: floodgate.OutcomeIgnored})
		return q.gone(r, &w.d, ended)
	}
	return q.granted(w)
}

// tooLate reports whether w, which joined the queue at now, would be
// handed a slot and hold it past its context's deadline at the queue's
// pace: a slot for each request ahead of it and one for it, each after
// the mean interval between freed slots, and then the mean time a
// request from the queue holds its slot. Without a deadline, or before
// the pace is measured, it is never too late. mu is held.
func (q *waiters) tooLate(ctx context.Context, w *waiter, now int64, lifo bool) bool {
	dl, ok := ctx.Deadline()
	if !ok {
		return false
	}
	gap := q.gap.Load()
	if gap == 0 {
		return false
	}
	ahead := q.ahead(w.rank, lifo)
	if !lifo {
		ahead-- // w itself, counted among its priority
	}
	return now+int64(ahead+1)*gap+q.held.Load() >= dl.UnixNano()
}

// granted is the decision of w, whose wait ended with a slot or a final
// deny handed to it (or its eviction).
func (q *waiters) granted(w *waiter) (floodgate.Decision, floodgate.Done, error) {
	if w.handed && w.d.Allowed {
		q.waited.Add(1)
	}
	return w.d, w.done, nil
}

// gone is the deny of a request whose context ended before it had a slot:
// RetryAfter 0 (no wait would admit a request that is gone) and an error
// that wraps the context's.
func (q *waiters) gone(r *floodgate.Request, denied *floodgate.Decision, err error) (floodgate.Decision, floodgate.Done, error) {
	var d floodgate.Decision
	if denied != nil {
		d = *denied
	}
	d.Allowed, d.Remaining, d.RetryAfter = false, 0, 0
	d.Stage, d.Priority = floodgate.StageConcurrency, r.Priority
	if d.Source == "" {
		d.Source = floodgate.SourceConcurrency
	}
	return d, nil, fmt.Errorf("concurrency: the request's context ended while it waited for a slot: %w", err)
}

// after returns a channel that fires after d on the limiter's Clock (its
// After when it has one, as package testing/clock's fake does) and a
// function that stops the timer.
func (q *waiters) after(d time.Duration) (<-chan time.Time, func()) {
	if a, ok := q.clock.(interface {
		After(time.Duration) <-chan time.Time
	}); ok {
		return a.After(d), func() {}
	}
	t := time.NewTimer(d)
	return t.C, func() { t.Stop() }
}
