package fallback

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sony/gobreaker/v2"
	"golang.org/x/time/rate"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/internal/cause"
	"github.com/floodgate-go/floodgate/internal/reqctx"
	"github.com/floodgate-go/floodgate/quota"
)

// Store is a quota.Store that asks a primary store under a circuit breaker
// and a per-call timeout, and decides by each bucket's OnStoreError when the
// primary cannot answer. See the package documentation for the rules.
//
// A Store is safe for concurrent use.
type Store struct {
	primary      quota.Store
	closedTO     time.Duration
	slowGrace    time.Duration
	instances    func() int
	seen         *lastKnown
	lastOK       atomic.Int64 // unix nanoseconds of the last answer from the primary (at first: New)
	cb           *gobreaker.CircuitBreaker[bool]
	budget       *budget // of a call with no fail-closed bucket
	clock        floodgate.Clock
	logger       *slog.Logger
	name         string
	userOnChange func(name string, from, to gobreaker.State)

	mu    sync.Mutex // guards local and ch.owed; held across a local decision
	local *localLimiters
	ch    *charges
	// localFn is decideLocal as a func value, made once.
	localFn func(buckets []quota.Bucket, res []quota.Result, allowed bool) bool

	lastErrMu  sync.Mutex // guards lastErr, lastLogged, suppressed
	lastErr    error
	lastLogged time.Time
	suppressed uint64

	// health is the fast-path word: see healthClean. closed mirrors the
	// breaker's state being closed.
	health atomic.Uint64
	closed atomic.Bool
	// gen counts the breaker's state changes: a fast-path failure counts
	// only in the state its call began in (gobreaker itself drops results
	// of calls begun in an earlier state).
	gen atomic.Uint64
	// halfOpen is set while the breaker lets its probes through: a probe
	// waits the closed budget, or answers late (see callPrimary).
	halfOpen atomic.Bool
	// probing is set while a probe's answer comes late (see probeLate),
	// from probeAt (unix nanoseconds, system clock): the breaker hears
	// the probe's outcome when it comes, and meanwhile no other take is
	// sent.
	probing atomic.Bool
	probeAt atomic.Int64
	// lateFrom is when a call last ran out of its budget (unix
	// nanoseconds; 0: never): for lateFor after it, calls run late (see
	// callLate).
	lateFrom atomic.Int64
	lateN    atomic.Int64 // late calls in flight (callLate's goroutines)
	// lateOpen counts the late calls abandoned by their callers and not
	// answered yet, which Sync waits for.
	lateOpen atomic.Int64
	// lateOK: calls may run late (see callLate): the primary takes
	// reports and has a backend to be late with. lateNative: the primary
	// answers every abandoned take late itself (lateanswer.Receiver), so
	// every call of a take with local buckets can be late at no cost
	// until it is, and callLate is never needed.
	lateOK, lateNative bool
	// shut is set by Close: no background Sync starts and no call runs
	// late any more.
	shut atomic.Bool

	c counters
}

// errCallerGone marks a failed primary call whose caller's context was
// already done: the caller left, which says nothing about the store, so the
// breaker excludes it.
var errCallerGone = errors.New("fallback: caller's context ended during the store call")

// New returns a Store guarding primary. Every option's argument is checked;
// a bad one makes New return an error naming it.
func New(primary quota.Store, opts ...Option) (*Store, error) {
	if primary == nil {
		return nil, errors.New("fallback: New: the primary store must not be nil")
	}
	c := config{
		name:          DefaultName,
		timeout:       DefaultTimeout,
		closedTimeout: DefaultClosedTimeout,
		slowGrace:     DefaultSlowGrace,
		failures:      DefaultFailures,
		openInterval:  DefaultOpenInterval,
		probes:        DefaultProbes,
		instances:     func() int { return 1 },
		localCapacity: DefaultLocalCapacity,
		clock:         floodgate.SystemClock(),
		logger:        slog.Default(),
	}
	for _, o := range opts {
		if o == nil {
			c.errs = append(c.errs, errors.New("nil Option"))
			continue
		}
		o(&c)
	}
	switch {
	case !c.closedSet:
		c.closedTimeout = max(c.closedTimeout, c.timeout)
	case c.closedTimeout < c.timeout:
		c.errs = append(c.errs, fmt.Errorf("WithClosedTimeout(%s): shorter than the call budget %s", c.closedTimeout, c.timeout))
	}
	if len(c.errs) > 0 {
		return nil, fmt.Errorf("fallback: New: %w", errors.Join(c.errs...))
	}
	if !c.instancesSet && shared(primary) {
		c.logger.Warn("floodgate: fallback over a store shared by other processes without WithInstances: while it is away, each instance decides locally with the whole limit, so N replicas admit N times it; pass WithInstances((*fleet.Members).Count), or build the chain with package guard",
			"fallback", c.name)
	}
	s := &Store{
		primary:      primary,
		budget:       newBudget(c.timeout, c.closedTimeout),
		closedTO:     c.closedTimeout,
		slowGrace:    c.slowGrace,
		instances:    c.instances,
		seen:         newLastKnown(c.localCapacity, c.clock.Now()),
		clock:        c.clock,
		logger:       c.logger,
		name:         c.name,
		userOnChange: c.onStateChange,
		local:        newLocalLimiters(c.localCapacity),
		ch:           newCharges(primary, c.localCapacity, c.clock),
	}
	s.ch.manual = c.manualSync
	if s.ch.rep == nil {
		s.logger.Warn("floodgate: the primary store takes no report calls (not a quota.Reporter): units admitted locally under on_store_error local will not be charged to it when it answers again",
			"breaker", c.name, "primary", fmt.Sprintf("%T", primary))
	}
	s.localFn = s.decideLocal
	s.lateNative = s.ch.rep != nil && !decidesItself(primary) && answersLate(primary)
	s.lateOK = s.ch.rep != nil && !decidesItself(primary) && !s.lateNative
	s.closed.Store(true)
	s.health.Store(healthClean)
	// A store not heard from yet gets the grace from now: the first calls
	// of a process (dialing, loading scripts on a busy host) that run out
	// of their budget are slow, not an outage; one that times out for
	// longer than the grace from the start is down.
	s.lastOK.Store(s.clock.Now().UnixNano())
	// Likewise, calls run late (see callLate) until the store has
	// answered within its budget for lateFor: a store not heard from yet
	// has not shown it is fast.
	s.lateFrom.Store(s.clock.Now().UnixNano())
	failures := c.failures
	s.cb = gobreaker.NewCircuitBreaker[bool](gobreaker.Settings{
		Name:        c.name,
		MaxRequests: c.probes,
		Timeout:     c.openInterval,
		ReadyToTrip: func(counts gobreaker.Counts) bool {
			return counts.ConsecutiveFailures >= failures
		},
		IsExcluded:    excluded,
		OnStateChange: s.stateChanged,
	})
	return s, nil
}

// decidesItself reports whether a layer of primary answers for its own
// backend's failures (DecidesOnStoreError: memstore, which has none, or
// another fallback Store): such a store is never late, so its calls never
// run in the background.
func decidesItself(primary quota.Store) bool {
	for l := range quota.Layers(primary) {
		if d, ok := l.(interface{ DecidesOnStoreError() bool }); ok && d.DecidesOnStoreError() {
			return true
		}
	}
	return false
}

// answersLate reports whether a layer of primary calls
// lateanswer.Receiver.Late for every take it abandons after sending (an
// AnswersLate() bool method reporting true).
func answersLate(primary quota.Store) bool {
	for l := range quota.Layers(primary) {
		if a, ok := l.(interface{ AnswersLate() bool }); ok && a.AnswersLate() {
			return true
		}
	}
	return false
}

// stateChanged logs a breaker transition, counts it and tells the user's
// callback. It runs under gobreaker's lock.
func (s *Store) stateChanged(name string, from, to gobreaker.State) {
	s.gen.Add(1)
	s.closed.Store(to == gobreaker.StateClosed)
	s.halfOpen.Store(to == gobreaker.StateHalfOpen)
	s.probing.Store(false) // a late probe of an earlier state counts no more
	s.dirty()
	if int(to) < len(s.c.transitions) {
		s.c.transitions[to].Add(1)
	}
	s.lastErrMu.Lock()
	cause := s.lastErr
	s.lastErrMu.Unlock()
	switch to {
	case gobreaker.StateOpen:
		s.logger.Warn("floodgate: store circuit breaker opened; deciding by each rule's on_store_error",
			"breaker", name, "from", from.String(), "to", to.String(), "last_error", errString(cause))
	case gobreaker.StateHalfOpen:
		s.logger.Info("floodgate: store circuit breaker half-open; probing the store",
			"breaker", name, "from", from.String(), "to", to.String())
	default:
		s.logger.Info("floodgate: store circuit breaker closed; the store decides again",
			"breaker", name, "from", from.String(), "to", to.String())
	}
	if s.userOnChange != nil {
		s.userOnChange(name, from, to)
	}
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// State returns the breaker's current state.
func (s *Store) State() gobreaker.State { return s.cb.State() }

// Take implements quota.Store. It asks the primary under the breaker and
// the timeout; when the breaker is open or the call fails it decides every
// bucket by its OnStoreError and returns a nil error, with each Result's
// Source naming what decided. It returns an error only for bad arguments
// and when the caller's context ends (nothing is then decided).
//
// Arguments are checked only off the healthy path: when the primary fails
// (so that a failure caused by bad input is the caller's error and does not
// count against the store) and before deciding without the primary.
func (s *Store) Take(ctx context.Context, buckets []quota.Bucket, res []quota.Result) (bool, error) {
	if len(res) < len(buckets) {
		return false, quota.ValidateTake(buckets, res)
	}
	if err := ctx.Err(); err != nil {
		return false, err
	}
	s.c.calls.Add(1)
	h := s.health.Load()
	if h&healthClean != 0 {
		// Fast path: closed, and no failure since the last success. A
		// success here could not change gobreaker's counts in any way
		// that matters (it trips on consecutive failures only), so only
		// a failure goes through it, to be counted.
		gen := s.gen.Load()
		allowed, err := s.callPrimary(ctx, buckets, res)
		if err == nil {
			if h2 := s.health.Load(); h2 != h && s.closed.Load() {
				// A failure was counted while this call ran: count
				// this later success too, as gobreaker would have,
				// so it resets the consecutive failures.
				if _, e := s.cb.Execute(func() (bool, error) { return true, nil }); e == nil && s.closed.Load() {
					s.health.CompareAndSwap(h2, h2|healthClean)
				}
			}
			return allowed, nil
		}
		if !excluded(err) && s.gen.Load() == gen {
			// Counted only while the breaker is still in the state the
			// call began in: a failure that outlived an open interval
			// must not take a half-open probe's place.
			_, _ = s.cb.Execute(func() (bool, error) { return false, err })
		}
		return s.failed(ctx, buckets, res, err)
	}
	if s.probing.Load() && s.halfOpen.Load() {
		if time.Now().UnixNano()-s.probeAt.Load() < int64(probeWait*s.closedTO) {
			// A probe's answer is on its way: gobreaker's one probe.
			return s.failed(ctx, buckets, res, gobreaker.ErrTooManyRequests)
		}
		s.probeDone(errProbeLost) // it never came
	}
	allowed, err := s.cb.Execute(func() (bool, error) {
		return s.callPrimary(ctx, buckets, res)
	})
	if err == nil {
		if s.closed.Load() {
			// Clean again, unless a failure was counted since h was read.
			s.health.CompareAndSwap(h, h|healthClean)
		}
		return allowed, nil
	}
	return s.failed(ctx, buckets, res, err)
}

// healthClean is the low bit of Store.health: set while the breaker is
// closed and no failure was counted since the last success. The other bits
// count failures, so a success that started before a failure was counted
// cannot set the bit back.
const healthClean = 1

// dirty clears the clean bit and bumps the failure count. It is called after
// gobreaker has counted a failure, or on a state change.
func (s *Store) dirty() {
	for {
		h := s.health.Load()
		if s.health.CompareAndSwap(h, (h|healthClean)+1) {
			return
		}
	}
}

func excluded(err error) bool {
	switch err.(type) {
	case badInputError, slowError:
		return true
	}
	return err == errCallerGone
}

// lateOf returns the late call err carries, if any (the breaker returns
// a call's error as the call returned it).
func lateOf(err error) *lateCall {
	switch e := err.(type) {
	case slowError:
		return e.late
	case lateError:
		return e.late
	}
	return nil
}

// failed handles a Take the primary did not answer: err is what the
// breaker returned.
func (s *Store) failed(ctx context.Context, buckets []quota.Bucket, res []quota.Result, err error) (bool, error) {
	switch {
	case err == errCallerGone:
		s.c.canceled.Add(1)
		if err := ctx.Err(); err != nil {
			return false, err
		}
		// The caller's deadline passed a moment before its own timer
		// fired.
		return false, context.DeadlineExceeded
	case err == gobreaker.ErrOpenState || err == gobreaker.ErrTooManyRequests:
		s.c.rejected.Add(1)
		if err := quota.ValidateTake(buckets, res); err != nil {
			return false, err
		}
	default:
		var bad badInputError
		if errors.As(err, &bad) {
			return false, bad.err
		}
		var slow slowError
		if errors.As(err, &slow) {
			s.c.slow.Add(1)
			s.c.causes[cause.TimeoutIndex].Add(1)
			break
		}
		s.c.causes[cause.Index(err)].Add(1)
		s.dirty()
		s.c.failures.Add(1)
		if cause.IsTimeout(err) {
			s.c.timeouts.Add(1)
		}
		s.noteFailure(err)
	}
	allowed := s.decide(buckets, res)
	if l := lateOf(err); l != nil {
		if !allowed && s.awaitLate(ctx, l, buckets, res) {
			return l.allowed, nil
		}
		s.decidedLate(l, allowed)
	}
	return allowed, nil
}

// slowError carries a call that ran out of its budget while the primary
// kept answering others; the breaker excludes it.
type slowError struct {
	err  error
	late *lateCall // nil: the call was abandoned (see callLate)
}

func (e slowError) Error() string { return "slow call: " + e.err.Error() }

// badInputError carries a check failure of the caller's buckets through the
// breaker, which excludes it.
type badInputError struct{ err error }

func (e badInputError) Error() string { return e.err.Error() }

// callPrimary is one guarded call: the primary under the timeout. A
// failure is classified here, inside the breaker: the caller leaving, or
// bad input, is excluded from the breaker's counts.
func (s *Store) callPrimary(ctx context.Context, buckets []quota.Bucket, res []quota.Result) (bool, error) {
	budget := s.budget.get()
	local, closed := false, false
	for i := range buckets {
		switch buckets[i].OnStoreError {
		case quota.FailClosed:
			closed = true
		case quota.FailLocal:
			local = true
		}
	}
	probe := false
	if s.halfOpen.Load() {
		// A probe decides whether the whole instance goes back to the
		// store, and a store that came back busy (a restarted Redis
		// reloading its scripts, a loaded host) must not be held open
		// by a probe that timed out after a few milliseconds. So a probe
		// the primary answers late (a take with local buckets, of a
		// primary with late answers) waits a healthy call's budget and
		// is decided locally if need be, the breaker hearing its outcome
		// when it comes (probeLate); any other waits the closed budget.
		probe = local && !closed && s.lateNative
		if !probe {
			budget = s.closedTO
		}
	}
	if closed {
		budget = s.closedTO
	}
	if local && s.lateOK && s.lateFrom.Load() != 0 {
		// shut is read after lateN is claimed: Close sets it before
		// waiting for lateN to drain.
		if s.lateN.Add(1) <= maxLate && !s.shut.Load() {
			return s.callLate(ctx, buckets, res, budget)
		}
		s.lateN.Add(-1) // too many in flight, or closed: as on the healthy path
	}
	cctx := acquireCallCtx(ctx, budget)
	if local && s.lateNative {
		cctx.s = s
	}
	allowed, err := s.primary.Take(cctx, buckets, res)
	if err == nil {
		if rand.Uint32N(sampleEvery) == 0 {
			if d, ok := cctx.elapsed(); ok {
				s.budget.sample(d)
			}
		}
		releaseCallCtx(cctx)
		now := s.clock.Now()
		s.lastOK.Store(now.UnixNano())
		s.seen.record(buckets, res, now)
		if s.ch.work.Load() != 0 {
			s.kick()
		}
		return allowed, nil
	}
	gone := ctx.Err() != nil || cctx.callerGone()
	late := cctx.late
	if d, ok := cctx.waited(); ok {
		reqctx.AddWait(ctx, d) // the request waited on a failing store
	}
	releaseCallCtx(cctx)
	if late != nil {
		if probe {
			return s.probeLate(ctx, buckets, res, err, gone, late)
		}
		return s.abandonedLate(ctx, buckets, res, err, gone, late)
	}
	return false, s.classify(buckets, res, err, gone, nil)
}

// probeWait bounds, in closed budgets, how long a probe's late answer is
// waited for (probing) before the probe counts as failed.
const probeWait = 4

// errProbeLost is the outcome of a probe whose late answer never came.
var errProbeLost = errors.New("fallback: the breaker's probe got no answer")

// probeLate ends a probe whose caller waited a healthy call's budget while
// the primary still runs it: the caller is decided locally (abandonedLate;
// a take the local limiters deny waits no longer), the breaker counts
// nothing now, and the probe's answer, when it comes, is its outcome
// (finishLate: probeDone). Meanwhile no other take is sent (Take).
func (s *Store) probeLate(ctx context.Context, buckets []quota.Bucket, res []quota.Result, err error, gone bool, l *lateCall) (bool, error) {
	s.probeAt.Store(time.Now().UnixNano())
	s.probing.Store(true)
	l.mu.Lock()
	fin := l.finished
	if !fin {
		l.probe = true
		l.deadline = time.Now() // a local deny does not wait for it either
	}
	l.mu.Unlock()
	allowed, err := s.abandonedLate(ctx, buckets, res, err, gone, l)
	if fin {
		// It answered just now: the breaker counts this answer.
		s.probing.Store(false)
		return allowed, err
	}
	var le lateError
	if errors.As(err, &le) {
		// Not the probe's outcome, which comes late: not counted.
		return allowed, slowError(le)
	}
	return allowed, err
}

// probeDone tells the breaker the outcome of a probe whose answer came
// late (nil: the primary answered), once.
func (s *Store) probeDone(err error) {
	if !s.probing.CompareAndSwap(true, false) {
		return
	}
	_, _ = s.cb.Execute(func() (bool, error) { return err == nil, err })
}

// answered records an answer of the primary to a take.
func (s *Store) answered(buckets []quota.Bucket, res []quota.Result) {
	now := s.clock.Now()
	s.lastOK.Store(now.UnixNano())
	s.seen.record(buckets, res, now)
	if s.ch.work.Load() != 0 {
		s.kick()
	}
}

// classify turns a failed call's error into what the breaker sees: the
// caller leaving, or bad input, is excluded from its counts, and so is a
// call that ran out of its budget while the primary answers others
// (slow). A call still running in the background (late, see callLate)
// rides along, so that the local decision can be matched with what the
// primary did.
func (s *Store) classify(buckets []quota.Bucket, res []quota.Result, err error, gone bool, late *lateCall) error {
	if gone {
		return errCallerGone
	}
	if bad := quota.ValidateTake(buckets, res); bad != nil {
		return badInputError{bad}
	}
	if cause.IsTimeout(err) {
		s.lateFrom.Store(s.clock.Now().UnixNano())
		if s.clock.Now().UnixNano()-s.lastOK.Load() < int64(s.slowGrace) {
			// The primary answered another call within the grace: it is
			// busy, not down. Decide this one locally, but do not count it.
			return slowError{err: err, late: late}
		}
	}
	// Remembered before the breaker counts it, so the log line of the
	// transition it causes names it.
	s.lastErrMu.Lock()
	s.lastErr = err
	s.lastErrMu.Unlock()
	if late != nil {
		return lateError{err: err, late: late}
	}
	return err
}

// noteFailure logs store failures at most once per second, with the number suppressed since.
func (s *Store) noteFailure(err error) {
	now := s.clock.Now()
	s.lastErrMu.Lock()
	if !s.lastLogged.IsZero() && now.Sub(s.lastLogged) < defaultFailureLogPeriod && now.Sub(s.lastLogged) >= 0 {
		s.suppressed++
		s.lastErrMu.Unlock()
		return
	}
	suppressed := s.suppressed
	s.suppressed = 0
	s.lastLogged = now
	s.lastErrMu.Unlock()
	s.logger.Warn("floodgate: rate-limit store call failed; deciding by each rule's on_store_error",
		"breaker", s.name, "cause", cause.Names[cause.Index(err)], "error", err.Error(), "suppressed_since_last_log", suppressed)
}

// maxStackReservations is how many local buckets one Take decides without
// allocating the reservation list.
const maxStackReservations = 8

// decide answers a Take without the primary: quota.DecideUnavailable
// applies each bucket's OnStoreError, with the local limiters deciding the
// FailLocal buckets. It counts every bucket decision.
func (s *Store) decide(buckets []quota.Bucket, res []quota.Result) bool {
	allowed := quota.DecideUnavailable(buckets, res, s.localFn)
	if allowed {
		s.c.takesAllowed.Add(1)
	} else {
		s.c.takesDenied.Add(1)
	}
	for i := range buckets {
		a := 0
		if res[i].Allowed {
			a = 1
		}
		m := buckets[i].OnStoreError
		s.c.modes[m][a].Add(1)
		s.c.rule(buckets[i].Rule)[m][a].Add(1)
	}
	return allowed
}

// DecidesOnStoreError reports true: a Store answers every Take, deciding
// by each bucket's OnStoreError when the primary cannot, so a
// tiers.Limiter over it has every fail mode, "local" included.
func (s *Store) DecidesOnStoreError() bool { return true }

// decideLocal decides the FailLocal buckets whose cost is within capacity
// with their local limiters, all or nothing, under s.mu: it reserves each
// bucket's cost at the clock's now and cancels every reservation (newest
// first, so each restores exactly what it took) if any bucket cannot
// proceed now or allowed is already false. It returns whether the Take is
// allowed. A cost above the local share but within the rule's capacity is
// denied with quota.StoreErrorRetryAfter: only the store can admit it.
func (s *Store) decideLocal(buckets []quota.Bucket, res []quota.Result, allowed bool) bool {
	n := 0
	for i := range buckets {
		if buckets[i].OnStoreError == quota.FailLocal {
			n++
		}
	}
	type held struct {
		i int
		e *localEntry
		r *rate.Reservation
	}
	var stack [maxStackReservations]held
	hs := stack[:0]
	if n > maxStackReservations {
		hs = make([]held, 0, n)
	}
	inst := max(1, s.instances())
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.clock.Now()
	for i := range buckets {
		b := &buckets[i]
		if b.OnStoreError != quota.FailLocal || b.Cost > b.Limit.Capacity() {
			continue
		}
		e := s.local.get(b.Key, b.Limit, inst, now, s.seen.lookup, s.ch.owedLocked(b.Key), buckets)
		r := &res[i]
		r.Limit = e.burst
		if b.Cost > e.burst {
			// The local share can never hold this cost; only the store
			// could admit it, so wait for the store.
			r.RetryAfter = quota.StoreErrorRetryAfter
			allowed = false
			continue
		}
		rv := e.lim.ReserveN(now, int(b.Cost))
		hs = append(hs, held{i: i, e: e, r: rv})
		switch d := rv.DelayFrom(now); {
		case d <= 0:
			r.Allowed = true
		case d <= b.MaxWait:
			// A bucket that may wait keeps its reservation: the units
			// are booked, and the request waits for them.
			r.Allowed, r.Wait = true, ceilMicro(d)
		default:
			r.RetryAfter = ceilMicro(d)
			allowed = false
		}
	}
	if !allowed {
		for j := len(hs) - 1; j >= 0; j-- {
			hs[j].r.CancelAt(now)
			res[hs[j].i].Wait = 0 // nothing booked
		}
	} else {
		// Admitted without the store: owed to it, charged when it
		// answers again (see Sync).
		for _, h := range hs {
			s.ch.addLocked(&buckets[h.i], buckets[h.i].Cost, inst)
		}
	}
	for _, h := range hs {
		tokens := h.e.lim.TokensAt(now)
		r := &res[h.i]
		if tokens > 0 {
			r.Remaining = int64(math.Floor(tokens))
		}
		r.Reset = h.e.durationFor(float64(h.e.burst) - tokens)
	}
	return allowed
}

// ceilMicro rounds d up to a whole microsecond, saturating: x/time/rate
// reports a wait beyond its range as MaxInt64, which rounding up would
// wrap negative (read by package tiers as a cost beyond capacity).
func ceilMicro(d time.Duration) time.Duration {
	if r := d % time.Microsecond; r != 0 {
		if d > math.MaxInt64-time.Microsecond {
			return math.MaxInt64
		}
		d += time.Microsecond - r
	}
	return d
}

// shared reports whether a store beneath s (s included) says it is shared
// by other processes.
func shared(s quota.Store) bool {
	for l := range quota.Layers(s) {
		if sh, ok := l.(interface{ Shared() bool }); ok && sh.Shared() {
			return true
		}
	}
	return false
}
