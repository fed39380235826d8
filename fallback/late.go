package fallback

import (
	"context"
	"sync"
	"time"

	"github.com/floodgate-go/floodgate/internal/reqctx"
	"github.com/floodgate-go/floodgate/quota"
)

// maxLate bounds the late calls one Store has in flight; beyond it, calls
// run as on the healthy path (abandoned at their budget, their outcome
// unknown).
const maxLate = 256

// lateFor is how long after a call ran out of its budget the calls of
// takes with local buckets run late (see callLate).
const lateFor = 10 * time.Second

// lateError carries a failed call that still runs (see callLate); it
// unwraps to the call's error.
type lateError struct {
	err  error
	late *lateCall
}

func (e lateError) Error() string { return e.err.Error() }
func (e lateError) Unwrap() error { return e.err }

// lateCall is a take sent to the primary in the background with the
// closed budget, whose caller waited only its own budget. If the caller
// stopped waiting, the take was decided locally, and the primary's answer,
// when it comes, says what the primary charged: the two are matched so
// that every unit is charged once, and only units admitted are (see
// reconcile).
type lateCall struct {
	buckets []quota.Bucket
	res     []quota.Result
	done    chan struct{}
	allowed bool
	err     error

	mu        sync.Mutex
	finished  bool // the primary answered (or failed)
	abandoned bool // the caller stopped waiting
	decided   bool // the caller's local decision is known
	deadline  time.Time
	local     bool // the local decision allowed the take
	probe     bool // the breaker's probe: its answer is its outcome
}

// callLate (with s.lateN counting it) is callPrimary for a take with local buckets while the primary
// is slow (a call ran out of its budget within lateFor): the call runs in
// the background with the closed budget, and the caller waits its own
// budget for it. A call that outlives the caller's budget was sent and is
// usually applied later (a paused Redis runs the commands queued on its
// sockets when it resumes; a loaded one answers late): its answer, when it
// comes, is matched with the local decision instead of being lost. The
// healthy path never comes here.
func (s *Store) callLate(ctx context.Context, buckets []quota.Bucket, res []quota.Result, budget time.Duration) (bool, error) {
	n := len(buckets)
	l := &lateCall{buckets: append([]quota.Bucket(nil), buckets...), res: make([]quota.Result, n), done: make(chan struct{})}
	// A take denied locally waits for the answer up to the closed
	// budget (awaitLate); the call itself runs for the slow grace too,
	// so that the answer to a call that outlives both (Redis paused
	// longer than the closed budget) is still learnt and reconciled.
	l.deadline = time.Now().Add(max(budget, s.closedTO))
	go func() {
		defer s.lateN.Add(-1)
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), max(budget, s.closedTO, s.slowGrace))
		start := time.Now()
		l.allowed, l.err = s.primary.Take(cctx, l.buckets, l.res)
		cancel()
		if l.err == nil {
			s.budget.sampleLate(time.Since(start), budget)
		}
		s.finishLate(l)
	}()
	t0 := time.Now()
	t := time.NewTimer(budget)
	defer t.Stop()
	var err error
	select {
	case <-l.done:
		if l.err == nil {
			copy(res, l.res[:n])
			s.answered(buckets, res)
			if s.clock.Now().UnixNano()-s.lateFrom.Load() > int64(lateFor) {
				s.lateFrom.Store(0)
			}
			return l.allowed, nil
		}
		return false, s.classify(buckets, res, l.err, ctx.Err() != nil, nil)
	case <-ctx.Done():
		err = ctx.Err()
	case <-t.C:
		err = context.DeadlineExceeded
	}
	reqctx.AddWait(ctx, time.Since(t0)) // the request waited on a slow store
	return s.abandonedLate(ctx, buckets, res, err, ctx.Err() != nil, l)
}

// abandonedLate ends a call its caller stopped waiting for while it still
// runs (callLate's goroutine, or the primary itself, which hands its
// answer over through lateanswer.Receiver; see callCtx.Late): an answer
// that came in the meantime is the take's after all; otherwise the call
// rides along with the error, so that the local decision can be matched
// with what the primary did.
func (s *Store) abandonedLate(ctx context.Context, buckets []quota.Bucket, res []quota.Result, err error, gone bool, l *lateCall) (bool, error) {
	l.mu.Lock()
	if !l.abandoned && !l.finished {
		s.lateOpen.Add(1) // finishLate ends it
	}
	l.abandoned = true
	fin := l.finished
	l.mu.Unlock()
	if fin {
		// It answered just now: take the answer after all.
		if l.err == nil {
			copy(res, l.res[:len(buckets)])
			s.answered(buckets, res)
			return l.allowed, nil
		}
		return false, s.classify(buckets, res, l.err, gone, nil)
	}
	if gone {
		s.decidedLate(l, false) // the caller left: nothing admitted
		return false, errCallerGone
	}
	return false, s.classify(buckets, res, err, false, l)
}

// finishLate records the primary's answer to a late call.
func (s *Store) finishLate(l *lateCall) {
	l.mu.Lock()
	l.finished = true
	ab, dec, local, probe := l.abandoned, l.decided, l.local, l.probe
	l.mu.Unlock()
	close(l.done)
	if probe {
		s.probeDone(l.err)
	}
	if !ab {
		return // the caller took the answer
	}
	defer s.lateOpen.Add(-1)
	if l.err == nil {
		s.answered(l.buckets, l.res)
	}
	if dec {
		s.reconcile(l, local)
	}
}

// decidedLate records the local decision of a take whose call still
// runs.
func (s *Store) decidedLate(l *lateCall, allowed bool) {
	l.mu.Lock()
	l.decided, l.local = true, allowed
	fin := l.finished
	l.mu.Unlock()
	if fin {
		s.reconcile(l, allowed)
	}
}

// reconcile matches what the primary did with a late call and what the
// local decision did: if the primary denied (or failed), it charged
// nothing, and the local admits stay owed. If it allowed, it charged every
// bucket its cost: local buckets admitted locally are then paid for (no
// longer owed); a take denied locally had its units charged without being
// admitted, and they are given back through the same recorded report
// calls (a negative charge), so the store ends charged for what was
// admitted.
func (s *Store) reconcile(l *lateCall, local bool) {
	s.c.late.Add(1)
	if l.err != nil || !l.allowed {
		return
	}
	s.c.lateApplied.Add(1)
	inst := max(1, s.instances())
	s.mu.Lock()
	defer s.mu.Unlock()
	for i := range l.buckets {
		b := &l.buckets[i]
		switch {
		case b.Cost == 0:
		case !local:
			s.ch.addLocked(b, -b.Cost, inst)
		case b.OnStoreError == quota.FailLocal:
			s.ch.addLocked(b, -b.Cost, inst)
		}
	}
}

// awaitLate waits, for a take the local limiters denied, for the late
// call's answer, up to the closed budget from the call's start (or the
// caller's end), and no longer than the closed budget from the primary's
// last answer: a deny decided locally costs a request that the store
// may well admit, and a short stall should not turn into denials, while
// an admit decided locally costs nothing to wait for; but a store silent
// for the closed budget is stalled, and a request that waited for it
// would only hold its slot (every stage before it counts it in flight).
// If the primary answers in time, its answer is the take's (res is
// overwritten; the local decision charged nothing) and awaitLate reports
// true.
func (s *Store) awaitLate(ctx context.Context, l *lateCall, buckets []quota.Bucket, res []quota.Result) bool {
	wait := time.Until(l.deadline)
	if silent := time.Duration(s.lastOK.Load() + int64(s.closedTO) - s.clock.Now().UnixNano()); silent < wait {
		wait = silent
	}
	if wait <= 0 {
		return false
	}
	t0 := time.Now()
	defer func() { reqctx.AddWait(ctx, time.Since(t0)) }()
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case <-l.done:
	case <-t.C:
		return false
	case <-ctx.Done():
		return false
	}
	if l.err != nil {
		return false
	}
	// finishLate saw the call abandoned and no decision: it recorded the
	// answer and reconciles nothing.
	copy(res, l.res[:len(buckets)])
	l.mu.Lock()
	l.decided = true // nothing to reconcile: the store decided
	l.mu.Unlock()
	s.c.lateAnswered.Add(1)
	return true
}
