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
)

var orderNames = [...]string{"fifo", "lifo"}

// String returns "fifo" or "lifo".
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
	return fmt.Errorf("concurrency: unknown wait order %q (want fifo or lifo)", string(text))
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
}

// withDefaults returns w with Queue set when it waits.
func (w Wait) withDefaults() Wait {
	if w.Max > 0 && w.Queue == 0 {
		w.Queue = DefaultQueue
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
		add(field.Errorf("order", "%d is not a known order (FIFO, LIFO)", uint8(w.Order)))
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
	clock floodgate.Clock
	try   tryFunc
	n     atomic.Int64 // requests queued
	// waited counts the requests admitted with a slot that another
	// request's release handed them while they waited (tests read it).
	waited atomic.Int64

	mu    sync.Mutex
	lists [floodgate.NumPriorities]waitList // by rank; guarded by mu
}

// waitList is a doubly linked list of waiters, oldest at head.
type waitList struct{ head, tail *waiter }

// waiter is one request waiting for a slot.
type waiter struct {
	r          *floodgate.Request
	rank       int
	prev, next *waiter
	queued     bool          // in a list; guarded by waiters.mu
	handed     bool          // granted by another request's scan, not its own; set before ch receives
	ch         chan struct{} // receives once the waiter is granted or evicted
	d          floodgate.Decision
	done       floodgate.Done
}

func (q *waiters) init(w Wait, clock floodgate.Clock, try tryFunc) {
	w = w.withDefaults()
	q.cfg.Store(&w)
	q.clock, q.try = clock, try
}

func (q *waiters) set(w Wait) {
	w = w.withDefaults()
	q.cfg.Store(&w)
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

// scan tries the waiting requests in the order a freed slot goes to them
// (priority, then FIFO or LIFO) and hands a slot to each that now fits;
// it stops at a deny that refuses every request. self, when not nil, is
// the request that just joined: when the scan stops before trying it, it
// takes the deny that stopped the scan. mu is held.
func (q *waiters) scan(self *waiter) {
	lifo := q.cfg.Load().Order == LIFO
	for rk := len(q.lists) - 1; rk >= 0; rk-- {
		w := q.lists[rk].first(lifo)
		for w != nil {
			next := q.lists[rk].after(w, lifo)
			d, done, all, err := q.try(w.r)
			if d.Allowed || err != nil {
				q.remove(w)
				w.d, w.done, w.handed = d, done, w != self
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
			w = next
		}
	}
}

func (l *waitList) first(lifo bool) *waiter {
	if lifo {
		return l.tail
	}
	return l.head
}

func (l *waitList) after(w *waiter, lifo bool) *waiter {
	if lifo {
		return w.prev
	}
	return w.next
}

// push appends w (mu held).
func (q *waiters) push(w *waiter) {
	l := &q.lists[w.rank]
	w.prev, w.next, w.queued = l.tail, nil, true
	if l.tail != nil {
		l.tail.next = w
	} else {
		l.head = w
	}
	l.tail = w
	q.n.Add(1)
}

// remove unlinks w (mu held).
func (q *waiters) remove(w *waiter) {
	l := &q.lists[w.rank]
	if w.prev != nil {
		w.prev.next = w.next
	} else {
		l.head = w.next
	}
	if w.next != nil {
		w.next.prev = w.prev
	} else {
		l.tail = w.prev
	}
	w.prev, w.next, w.queued = nil, nil, false
	q.n.Add(-1)
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
	q.push(w)
	q.scan(w)
	if w.queued && int(q.n.Load()) > cfg.Queue {
		// Full: r takes the place of the waiter a slot would reach last
		// if r outranks it, and is refused otherwise.
		evict := q.last(cfg.Order == LIFO)
		if evict.rank >= w.rank {
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
	timer, stop := q.after(cfg.Max)
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
