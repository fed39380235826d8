package fleetconc

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/concurrency"
)

// Polling bounds of a request waiting for a fleet slot (see the package
// documentation, "Waiting for a slot").
const (
	pollFirst = 5 * time.Millisecond
	pollMax   = 50 * time.Millisecond
)

// WithWait lets a request that finds a fleet cap full wait up to w.Max
// for a slot of that cap instead of being denied at once (see the package
// documentation, "Waiting for a slot"). w's fields are concurrency.Wait's;
// the zero value denies at once.
func WithWait(w concurrency.Wait) Option {
	return func(o *config) {
		if err := w.Validate(); err != nil {
			o.fail("WithWait", "%v", err)
		}
		if w.Fairness != nil {
			// Each key has its own queue here: a per-key cap already
			// bounds each caller's share of the fleet.
			o.fail("WithWait", "Fairness is not supported by the fleet-wide queue (its queues are per key; a per-key cap bounds each caller fleet-wide)")
		}
		if w.Max > 0 && w.Queue == 0 {
			w.Queue = concurrency.DefaultQueue
		}
		o.wait = w
	}
}

// waitQueue is a Limiter's requests waiting for fleet slots: one queue
// per Redis key, in which only the request the order picks (the head)
// asks Redis.
type waitQueue struct {
	cfg   concurrency.Wait
	clock floodgate.Clock // nil: real time

	mu   sync.Mutex
	n    int                    // requests waiting, every key
	keys map[string]*keyWaiters // Redis key -> its waiting requests

	// got counts the slots requests got after waiting in the queue (an
	// acquire that found room at once is not counted).
	got atomic.Int64
}

// keyWaiters are the requests waiting for one key, by priority rank,
// each rank in arrival order.
type keyWaiters struct {
	lists [floodgate.NumPriorities][]*fwaiter
}

// fwaiter is one request waiting for a fleet slot.
type fwaiter struct {
	key     string
	rank    int
	kick    chan struct{} // a slot of its key freed here, or it is head now, or evicted
	evicted bool          // guarded by waitQueue.mu
}

func (q *waitQueue) enabled() bool { return q.cfg.Max > 0 }

// rank is where a priority waits: unspecified ranks as write, as the
// shedder takes it by default (as package concurrency does).
func rank(p floodgate.Priority) int {
	if p == floodgate.PriorityUnspecified || !p.Valid() {
		return int(floodgate.PriorityWrite)
	}
	return int(p)
}

// head returns the waiter of kw the order picks next; mu held.
func (q *waitQueue) head(kw *keyWaiters) *fwaiter {
	for rk := len(kw.lists) - 1; rk >= 0; rk-- {
		if l := kw.lists[rk]; len(l) > 0 {
			if q.cfg.Order == concurrency.LIFO {
				return l[len(l)-1]
			}
			return l[0]
		}
	}
	return nil
}

// join queues w, evicting the waiter of the least priority a slot would
// reach last when the queue is full and w outranks it; it reports false
// when w itself cannot wait (the queue is full).
func (q *waitQueue) join(w *fwaiter) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.n >= q.cfg.Queue {
		victim := q.last()
		if victim == nil || victim.rank >= w.rank {
			return false
		}
		q.removeLocked(victim)
		victim.evicted = true
		kick(victim)
	}
	if q.keys == nil {
		q.keys = make(map[string]*keyWaiters)
	}
	kw := q.keys[w.key]
	if kw == nil {
		kw = &keyWaiters{}
		q.keys[w.key] = kw
	}
	kw.lists[w.rank] = append(kw.lists[w.rank], w)
	q.n++
	return true
}

// last returns the waiter a slot would reach last, of every key: the
// lowest rank's newest (FIFO) or oldest (LIFO); mu held.
func (q *waitQueue) last() *fwaiter {
	var worst *fwaiter
	for _, kw := range q.keys {
		for rk := range kw.lists {
			l := kw.lists[rk]
			if len(l) == 0 {
				continue
			}
			w := l[len(l)-1]
			if q.cfg.Order == concurrency.LIFO {
				w = l[0]
			}
			if worst == nil || w.rank < worst.rank {
				worst = w
			}
			break
		}
	}
	return worst
}

// leave removes w (if still queued) and kicks its key's new head, which
// then asks Redis.
func (q *waitQueue) leave(w *fwaiter) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.removeLocked(w)
	if kw := q.keys[w.key]; kw != nil {
		kick(q.head(kw))
	}
}

func (q *waitQueue) removeLocked(w *fwaiter) {
	kw := q.keys[w.key]
	if kw == nil {
		return
	}
	l := kw.lists[w.rank]
	for i, x := range l {
		if x == w {
			kw.lists[w.rank] = append(l[:i], l[i+1:]...)
			q.n--
			break
		}
	}
	if q.head(kw) == nil {
		delete(q.keys, w.key)
	}
}

// isHead reports whether w is its key's head; mu taken.
func (q *waitQueue) isHead(w *fwaiter) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	kw := q.keys[w.key]
	return kw != nil && q.head(kw) == w
}

// freed kicks the head of key's queue: a slot of key was just released
// by this instance.
func (q *waitQueue) freed(key string) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if kw := q.keys[key]; kw != nil {
		kick(q.head(kw))
	}
}

func kick(w *fwaiter) {
	if w == nil {
		return
	}
	select {
	case w.kick <- struct{}{}:
	default: // already kicked
	}
}

// after returns a channel that fires after d (on the Limiter's Clock
// when it has an After method) and a function that stops it.
func (q *waitQueue) after(d time.Duration) (<-chan time.Time, func()) {
	if a, ok := q.clock.(interface {
		After(time.Duration) <-chan time.Time
	}); ok {
		return a.After(d), func() {}
	}
	t := time.NewTimer(d)
	return t.C, func() { t.Stop() }
}

// waitSlot holds r, whose acquire of slot s found its cap full, until it
// gets the slot, the wait's deadline passes, it is evicted from a full
// queue, or ctx ends. While it is its key's head it asks Redis again
// after pollFirst, doubling to pollMax, and at once when this instance
// frees a slot of the key; otherwise it waits for its turn. deadline
// fires when the request's wait (shared by all its caps) ends.
// cut says that gone came from an acquire the context cut short (Redis
// may still run it), not from a wait between acquires.
func (l *Limiter) waitSlot(ctx context.Context, r *floodgate.Request, s slot, deadline <-chan time.Time) (n int64, got bool, gone, err error, cut bool) {
	q := &l.wait
	w := &fwaiter{key: s.key, rank: rank(r.Priority), kick: make(chan struct{}, 1)}
	if !q.join(w) {
		return 0, false, nil, nil, false
	}
	defer q.leave(w)
	poll := pollFirst
	for {
		var tick <-chan time.Time
		stop := func() {}
		if q.isHead(w) {
			tick, stop = q.after(poll)
		}
		select {
		case <-ctx.Done():
			stop()
			return 0, false, ctx.Err(), nil, false
		case <-deadline:
			stop()
			return 0, false, nil, nil, false
		case <-w.kick:
			poll = pollFirst
		case <-tick:
			poll = min(2*poll, pollMax)
		}
		stop()
		q.mu.Lock()
		evicted := w.evicted
		q.mu.Unlock()
		if evicted {
			return 0, false, nil, nil, false
		}
		if !q.isHead(w) {
			continue
		}
		n, got, gone, err = l.acquire(ctx, s)
		if got {
			q.got.Add(1)
		}
		if got || gone != nil || err != nil {
			return n, got, gone, err, gone != nil
		}
	}
}

// Waiting returns the requests waiting for a fleet slot on this instance.
func (l *Limiter) Waiting() int {
	l.wait.mu.Lock()
	defer l.wait.mu.Unlock()
	return l.wait.n
}
