package fallback

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/floodgate-go/floodgate/internal/lateanswer"
	"github.com/floodgate-go/floodgate/quota"
)

// callCtx is the context of one call to the primary store: it carries the
// caller's values, and its deadline is the earlier of the caller's deadline
// and the call's budget. It does not carry the caller's cancellation: a
// caller that cancels does not interrupt the call, which ends within the
// budget anyway, and Take then returns the caller's error (the semantics of
// context.WithTimeout(context.WithoutCancel(parent), budget), keeping the
// caller's deadline when it is earlier).
//
// It exists so the healthy path allocates nothing: callCtx values are
// pooled, and the timer that closes Done is armed only when the primary
// first asks for Done (a store that reads only Deadline and Err, like the
// in-process one, costs no timer at all). Err reports the deadline as soon as
// it has passed, closing Done first if the timer has not.
//
// A primary must not use the context after its Take returns; the value is
// then reused by a later call.
type callCtx struct {
	parent   context.Context
	budget   time.Duration
	started  atomic.Bool // at, deadline and callerDeadline are set
	at       time.Time   // when the budget started
	deadline time.Time
	// callerDeadline is true when deadline is the caller's own, earlier
	// than the budget: running out of it is the caller's doing.
	callerDeadline bool

	// s is set when the call's answer is wanted even after its budget
	// (the take has local buckets and the primary answers late): the
	// context then offers itself as the lateanswer.Receiver, and late is
	// the late call the primary opened with Late, if it did.
	s    *Store
	late *lateCall

	mu      sync.Mutex // guards arming, expiry and the timer
	done    chan struct{}
	timer   *time.Timer
	armed   atomic.Bool
	expired atomic.Bool
}

var callCtxPool = sync.Pool{New: func() any { return &callCtx{done: make(chan struct{})} }}

// acquireCallCtx returns a callCtx for parent with the given budget. The
// budget starts when the primary first consults the context (Deadline,
// Done or Err), which for a network store is the start of its request; a
// store that never consults it, like the in-process one, never pays for
// reading the clock.
func acquireCallCtx(parent context.Context, budget time.Duration) *callCtx {
	c := callCtxPool.Get().(*callCtx)
	c.parent = parent
	c.budget = budget
	return c
}

// start fixes the deadline on first use.
func (c *callCtx) start() {
	if c.started.Load() {
		return
	}
	c.mu.Lock()
	if !c.started.Load() {
		c.at = time.Now()
		c.deadline = c.at.Add(c.budget)
		c.callerDeadline = false
		if d, ok := c.parent.Deadline(); ok && d.Before(c.deadline) {
			c.deadline, c.callerDeadline = d, true
		}
		c.started.Store(true)
	}
	c.mu.Unlock()
}

// releaseCallCtx disarms c and pools it again unless its Done channel was
// closed (or is about to be, by a timer that already fired).
func releaseCallCtx(c *callCtx) {
	c.parent, c.s, c.late = nil, nil, nil
	c.started.Store(false)
	if !c.armed.Load() && !c.expired.Load() {
		// Never armed, never expired: nothing else can touch c once the
		// primary has returned.
		callCtxPool.Put(c)
		return
	}
	c.mu.Lock()
	reusable := !c.expired.Load()
	if c.armed.Load() && !c.timer.Stop() {
		reusable = false // the timer fired; its expire closes done
	}
	c.armed.Store(false)
	c.mu.Unlock()
	if reusable {
		callCtxPool.Put(c)
	}
}

// Deadline implements context.Context.
func (c *callCtx) Deadline() (time.Time, bool) {
	c.start()
	return c.deadline, true
}

// Done implements context.Context; the first call arms the timer.
func (c *callCtx) Done() <-chan struct{} {
	if !c.armed.Load() {
		c.start()
		c.mu.Lock()
		if !c.armed.Load() && !c.expired.Load() {
			d := time.Until(c.deadline)
			if c.timer == nil {
				c.timer = time.AfterFunc(d, c.expire)
			} else {
				c.timer.Reset(d)
			}
			c.armed.Store(true)
		}
		c.mu.Unlock()
	}
	return c.done
}

// elapsed returns how long the call has run, when its start is known:
// the primary consulted the context, and the deadline is the budget's,
// not the caller's.
func (c *callCtx) elapsed() (time.Duration, bool) {
	if !c.started.Load() || c.callerDeadline {
		return 0, false
	}
	return time.Since(c.deadline.Add(-c.budget)), true
}

// waited returns how long the call has run, when the primary consulted
// the context (which starts it).
func (c *callCtx) waited() (time.Duration, bool) {
	if !c.started.Load() {
		return 0, false
	}
	return time.Since(c.at), true
}

// callerGone reports whether the caller's own deadline, which this context
// inherited, has passed.
func (c *callCtx) callerGone() bool {
	return c.started.Load() && c.callerDeadline && !time.Now().Before(c.deadline)
}

// Err implements context.Context.
func (c *callCtx) Err() error {
	if c.expired.Load() {
		return context.DeadlineExceeded
	}
	c.start()
	if time.Now().Before(c.deadline) {
		return nil
	}
	c.expire()
	return context.DeadlineExceeded
}

// Value implements context.Context with the caller's values, except
// lateanswer.Key: the context itself when the call's late answer is
// wanted (see Late), else nothing (a Receiver of the caller's is not
// the primary's business: this Store answers its caller itself).
func (c *callCtx) Value(key any) any {
	if key == lateanswer.Key {
		if c.s != nil {
			return lateanswer.Receiver(c)
		}
		return nil
	}
	if p := c.parent; p != nil {
		return p.Value(key)
	}
	return nil
}

// expire closes Done once.
func (c *callCtx) expire() {
	c.mu.Lock()
	if !c.expired.Load() {
		c.expired.Store(true)
		close(c.done)
	}
	c.mu.Unlock()
}

// Late implements lateanswer.Receiver: the primary gave up waiting on a take
// it sent, and will hand its answer to the returned function. It opens the
// late call that failed's local decision is matched with (see reconcile).
// It is called before the primary's Take returns, in the caller's
// goroutine.
func (c *callCtx) Late(buckets []quota.Bucket) func(allowed bool, res []quota.Result, err error) {
	s := c.s
	if s == nil || c.late != nil {
		return nil
	}
	// A take denied locally waits for the answer up to the closed budget
	// from the call's start (awaitLate).
	l := &lateCall{buckets: buckets, done: make(chan struct{}), abandoned: true,
		deadline: time.Now().Add(max(0, s.closedTO-c.budget))}
	c.late = l
	s.lateOpen.Add(1) // abandoned from the start; finishLate ends it
	start, known, had := time.Time{}, false, c.budget
	if d, ok := c.elapsed(); ok {
		start, known = time.Now().Add(-d), true
	}
	return func(allowed bool, res []quota.Result, err error) {
		if err == nil && known {
			// How long a call that outlived its budget took: the
			// sample the calls answered in time cannot give.
			s.budget.sampleLate(time.Since(start), had)
		}
		l.allowed, l.res, l.err = allowed, res, err
		s.finishLate(l)
	}
}
