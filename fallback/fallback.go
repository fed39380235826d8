package fallback

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sony/gobreaker/v2"
	"golang.org/x/time/rate"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/internal/cause"
	"github.com/floodgate-go/floodgate/quota"
)

// Defaults for the options of New.
const (
	DefaultTimeout          = 5 * time.Millisecond
	DefaultClosedTimeout    = 250 * time.Millisecond
	DefaultSlowGrace        = time.Second
	DefaultFailures         = 5
	DefaultOpenInterval     = time.Second
	DefaultProbes           = 1
	DefaultLocalCapacity    = 10_000
	DefaultName             = "floodgate-store"
	defaultFailureLogPeriod = time.Second
)

// config is what the options set.
type config struct {
	name          string
	timeout       time.Duration
	closedTimeout time.Duration
	closedSet     bool
	slowGrace     time.Duration
	failures      uint32
	openInterval  time.Duration
	probes        uint32
	instances     func() int
	localCapacity int
	clock         floodgate.Clock
	logger        *slog.Logger
	onStateChange func(name string, from, to gobreaker.State)
	errs          []error
}

// Option configures a Store built by New.
type Option func(*config)

// WithTimeout sets the budget of one call to the primary store (default
// DefaultTimeout). A call still running when it passes counts as a failure
// and the fallback decides. It must be positive.
func WithTimeout(d time.Duration) Option {
	return func(c *config) {
		if d <= 0 {
			c.errs = append(c.errs, fmt.Errorf("WithTimeout(%s): the timeout must be positive", d))
		}
		c.timeout = d
	}
}

// WithFailures sets how many consecutive failed calls open the breaker
// (default DefaultFailures). It must be at least 1.
func WithFailures(n int) Option {
	return func(c *config) {
		if n < 1 || n > math.MaxInt32 {
			c.errs = append(c.errs, fmt.Errorf("WithFailures(%d): the count must be in [1, %d]", n, math.MaxInt32))
			return
		}
		c.failures = uint32(n)
	}
}

// WithOpenInterval sets how long the breaker stays open before it lets
// probes through (default DefaultOpenInterval). It must be positive.
func WithOpenInterval(d time.Duration) Option {
	return func(c *config) {
		if d <= 0 {
			c.errs = append(c.errs, fmt.Errorf("WithOpenInterval(%s): the interval must be positive", d))
		}
		c.openInterval = d
	}
}

// WithProbes sets how many calls a half-open breaker lets through to the
// primary at once, and how many of them must succeed in a row to close it
// (gobreaker's MaxRequests; default DefaultProbes). Every other call made
// while half-open is decided by the fallback, so a recovering store sees at
// most n calls from this instance until it is trusted again. It must be at
// least 1.
func WithProbes(n int) Option {
	return func(c *config) {
		if n < 1 || n > math.MaxInt32 {
			c.errs = append(c.errs, fmt.Errorf("WithProbes(%d): the count must be in [1, %d]", n, math.MaxInt32))
			return
		}
		c.probes = uint32(n)
	}
}

// WithInstances sets how the instances sharing each rule's quota are
// counted (default: 1). Local limiters run at each bucket's rate divided
// by the count, with a burst of its capacity divided by it (rounded down,
// at least 1), so the instances in fallback together admit about what the
// store would have. count is called on every local decision and must be
// cheap: pass (*fleet.Members).Count, which counts heartbeats in Redis and
// keeps the last count through an outage, or a constant func for a static
// replica count. Values below 1 count as 1.
func WithInstances(count func() int) Option {
	return func(c *config) {
		if count == nil {
			c.errs = append(c.errs, errors.New("WithInstances(nil): the count func must not be nil"))
			return
		}
		c.instances = count
	}
}

// WithClosedTimeout sets the budget of a call whose buckets include a rule
// with on_store_error "closed" (default DefaultClosedTimeout, or the
// WithTimeout budget when that is longer; set explicitly it must not be
// shorter): such a rule denies when the store cannot answer, so
// it waits longer for a busy store rather than deny a login because one
// call was slow.
func WithClosedTimeout(d time.Duration) Option {
	return func(c *config) {
		if d <= 0 {
			c.errs = append(c.errs, fmt.Errorf("WithClosedTimeout(%s): the timeout must be positive", d))
			return
		}
		c.closedTimeout, c.closedSet = d, true
	}
}

// WithSlowGrace sets how recently the primary must have answered for a
// call that runs out of its budget to count as slow rather than failed
// (default DefaultSlowGrace). A slow call is decided by on_store_error
// like a failed one but is not counted against the breaker: a store that
// keeps answering other calls is busy, not down. Errors (refused, reset,
// OOM, ...) always count. It must be positive.
func WithSlowGrace(d time.Duration) Option {
	return func(c *config) {
		if d <= 0 {
			c.errs = append(c.errs, fmt.Errorf("WithSlowGrace(%s): the grace must be positive", d))
			return
		}
		c.slowGrace = d
	}
}

// WithLocalCapacity bounds the number of buckets with a local limiter
// (default DefaultLocalCapacity). When a new bucket needs a limiter and the
// set is full, the least recently used limiter is evicted; a bucket whose
// limiter was evicted starts again with a full local burst. Stats reports
// evictions. It must be at least 1.
func WithLocalCapacity(n int) Option {
	return func(c *config) {
		if n < 1 {
			c.errs = append(c.errs, fmt.Errorf("WithLocalCapacity(%d): the capacity must be at least 1", n))
		}
		c.localCapacity = n
	}
}

// WithClock sets the clock local limiters read (default
// floodgate.SystemClock()). The breaker's open interval is measured by
// gobreaker on the system clock whatever this option says.
func WithClock(clk floodgate.Clock) Option {
	return func(c *config) {
		if clk == nil {
			c.errs = append(c.errs, errors.New("WithClock(nil): the clock must not be nil"))
		}
		c.clock = clk
	}
}

// WithLogger sets the logger for breaker state changes and store failures
// (default slog.Default()).
func WithLogger(l *slog.Logger) Option {
	return func(c *config) {
		if l == nil {
			c.errs = append(c.errs, errors.New("WithLogger(nil): the logger must not be nil"))
		}
		c.logger = l
	}
}

// WithName names the breaker in logs and state-change callbacks (default
// DefaultName).
func WithName(name string) Option {
	return func(c *config) {
		if name == "" {
			c.errs = append(c.errs, errors.New("WithName(\"\"): the name must not be empty"))
		}
		c.name = name
	}
}

// WithOnStateChange registers f to be called on every breaker state
// change, after it is logged. f runs with the breaker's lock held: it must
// be fast and must not call the Store. Telemetry (package otel) adapts to
// it.
func WithOnStateChange(f func(name string, from, to gobreaker.State)) Option {
	return func(c *config) {
		if f == nil {
			c.errs = append(c.errs, errors.New("WithOnStateChange(nil): the callback must not be nil"))
		}
		c.onStateChange = f
	}
}

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
	timeout      time.Duration
	clock        floodgate.Clock
	logger       *slog.Logger
	name         string
	userOnChange func(name string, from, to gobreaker.State)

	mu    sync.Mutex // guards local; held across a local decision
	local *localLimiters
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
	// waits the closed budget (see callPrimary).
	halfOpen atomic.Bool

	c counters
}

// counters are the Store's statistics; see Stats.
type counters struct {
	calls, failures, timeouts, canceled, rejected atomic.Uint64
	slow                                          atomic.Uint64
	causes                                        [cause.N]atomic.Uint64
	takesAllowed, takesDenied                     atomic.Uint64
	modes                                         modeCounts
	transitions                                   [3]atomic.Uint64 // [to state]
	byRule                                        sync.Map         // rule name -> *modeCounts
	rules                                         atomic.Int64     // entries in byRule
	settled, settleFailed, settleDropped          atomic.Uint64
	localSettled                                  atomic.Uint64
}

// modeCounts counts bucket decisions by [FailMode][allowed].
type modeCounts [3][2]atomic.Uint64

// MaxRules bounds the rules counted separately in Stats.ByRule; decisions of
// further rule names are counted under OtherRule. Rule names come from the
// policy, so the bound only matters for buckets built by hand.
const MaxRules = 1024

// OtherRule is the ByRule entry for rules beyond MaxRules.
const OtherRule = "_other"

// rule returns the counters of the named rule, creating them on first use.
func (c *counters) rule(name string) *modeCounts {
	if v, ok := c.byRule.Load(name); ok {
		return v.(*modeCounts)
	}
	if c.rules.Load() >= MaxRules {
		name = OtherRule
	}
	v, loaded := c.byRule.LoadOrStore(name, new(modeCounts))
	if !loaded {
		c.rules.Add(1)
	}
	return v.(*modeCounts)
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
	s := &Store{
		primary:      primary,
		timeout:      c.timeout,
		closedTO:     c.closedTimeout,
		slowGrace:    c.slowGrace,
		instances:    c.instances,
		seen:         newLastKnown(c.localCapacity, c.clock.Now()),
		clock:        c.clock,
		logger:       c.logger,
		name:         c.name,
		userOnChange: c.onStateChange,
		local:        newLocalLimiters(c.localCapacity),
	}
	s.localFn = s.decideLocal
	s.closed.Store(true)
	s.health.Store(healthClean)
	// A store not heard from yet gets the grace from now: the first calls
	// of a process (dialing, loading scripts on a busy host) that run out
	// of their budget are slow, not an outage; one that times out for
	// longer than the grace from the start is down.
	s.lastOK.Store(s.clock.Now().UnixNano())
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

// stateChanged logs a breaker transition, counts it and tells the user's
// callback. It runs under gobreaker's lock.
func (s *Store) stateChanged(name string, from, to gobreaker.State) {
	s.gen.Add(1)
	s.closed.Store(to == gobreaker.StateClosed)
	s.halfOpen.Store(to == gobreaker.StateHalfOpen)
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
	return s.decide(buckets, res), nil
}

// slowError carries a call that ran out of its budget while the primary
// kept answering others; the breaker excludes it.
type slowError struct{ err error }

func (e slowError) Error() string { return "slow call: " + e.err.Error() }

// badInputError carries a check failure of the caller's buckets through the
// breaker, which excludes it.
type badInputError struct{ err error }

func (e badInputError) Error() string { return e.err.Error() }

// callPrimary is one guarded call: the primary under the timeout. A
// failure is classified here, inside the breaker: the caller leaving, or
// bad input, is excluded from the breaker's counts.
func (s *Store) callPrimary(ctx context.Context, buckets []quota.Bucket, res []quota.Result) (bool, error) {
	budget := s.timeout
	if s.halfOpen.Load() {
		// A probe decides whether the whole instance goes back to the
		// store; it is one call per open interval, so it may wait the
		// closed budget: a store that came back busy (a restarted Redis
		// reloading its scripts, a loaded host) is not held open by a
		// probe that timed out after a few milliseconds.
		budget = s.closedTO
	}
	for i := range buckets {
		if buckets[i].OnStoreError == quota.FailClosed {
			budget = s.closedTO
			break
		}
	}
	cctx := acquireCallCtx(ctx, budget)
	allowed, err := s.primary.Take(cctx, buckets, res)
	if err == nil {
		releaseCallCtx(cctx)
		now := s.clock.Now()
		s.lastOK.Store(now.UnixNano())
		s.seen.record(buckets, res, now)
		return allowed, nil
	}
	gone := ctx.Err() != nil || cctx.callerGone()
	releaseCallCtx(cctx)
	if gone {
		return false, errCallerGone
	}
	if bad := quota.ValidateTake(buckets, res); bad != nil {
		return false, badInputError{bad}
	}
	if cause.IsTimeout(err) && s.clock.Now().UnixNano()-s.lastOK.Load() < int64(s.slowGrace) {
		// The primary answered another call within the grace: it is
		// busy, not down. Decide this one locally, but do not count it.
		return false, slowError{err}
	}
	// Remembered before the breaker counts it, so the log line of the
	// transition it causes names it.
	s.lastErrMu.Lock()
	s.lastErr = err
	s.lastErrMu.Unlock()
	return false, err
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
		e := s.local.get(b.Key, b.Limit, inst, now, s.seen.lookup, buckets)
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

// Stats is a snapshot of a Store's counters. Every Take that reaches the
// breaker is counted exactly once among Calls, and every bucket decided
// without the primary is counted once in Fallback by its mode and outcome.
type Stats struct {
	// State is the breaker's state now.
	State gobreaker.State
	// Calls is the number of Takes that reached the breaker.
	Calls uint64
	// Failures is the number of primary calls that failed (error or
	// timeout); Timeouts is the part of them that ran out of time (the
	// context's deadline, or a network deadline).
	Failures, Timeouts uint64
	// Slow is the number of calls that ran out of their budget while the
	// primary kept answering others (WithSlowGrace): decided without the
	// primary but not counted against the breaker, nor in Failures.
	Slow uint64
	// Causes counts failed and slow calls by cause: CauseTimeout,
	// CauseRefused, CauseReset, CauseNoScript, CauseOOM, CauseRedirect,
	// CauseOther (absent when 0).
	Causes map[string]uint64
	// Canceled is the number of primary calls abandoned because the
	// caller's context ended; they do not count against the store.
	Canceled uint64
	// Rejected is the number of Takes the breaker did not let through
	// (open, or half-open with every probe slot taken).
	Rejected uint64
	// FallbackTakesAllowed and FallbackTakesDenied count the Takes decided
	// without the primary, by outcome.
	FallbackTakesAllowed, FallbackTakesDenied uint64
	// Fallback counts the buckets decided without the primary by their
	// mode, as the bucket itself answered: for a local bucket, Allowed
	// means its limiter had the tokens (the Take may still have denied
	// because of another bucket, in which case nothing was charged).
	Fallback [3]ModeCount
	// ByRule counts the same decisions by the bucket's rule
	// (quota.Bucket.Rule) and mode: ByRule["login"][quota.FailClosed].
	// Rules that never fell back are absent; see MaxRules.
	ByRule map[string][3]ModeCount
	// Opened, HalfOpened and Closed count breaker transitions into each
	// state.
	Opened, HalfOpened, Closed uint64
	// LocalBuckets is the number of local limiters held; Evictions counts
	// those dropped by the LRU bound.
	LocalBuckets int
	Evictions    uint64
	// Settled counts settlements (quota.Settler) the primary applied;
	// SettleFailed those it did not (error, timeout, or a primary that
	// cannot settle); SettleDropped those not sent because the breaker
	// was open; LocalSettled the buckets settled on their local limiter.
	Settled, SettleFailed, SettleDropped, LocalSettled uint64
}

func (mc *modeCounts) snapshot() (out [3]ModeCount) {
	for m := range out {
		out[m] = ModeCount{Allowed: mc[m][1].Load(), Denied: mc[m][0].Load()}
	}
	return out
}

// ModeCount is the number of fallback bucket decisions of one mode.
type ModeCount struct {
	Allowed, Denied uint64
}

// Mode returns the counts of mode m (quota.FailLocal, FailOpen or
// FailClosed); an unknown mode has none.
func (st Stats) Mode(m quota.FailMode) ModeCount {
	if int(m) < len(st.Fallback) {
		return st.Fallback[m]
	}
	return ModeCount{}
}

// Stats returns a snapshot of the Store's counters.
func (s *Store) Stats() Stats {
	st := Stats{
		State:                s.cb.State(),
		Calls:                s.c.calls.Load(),
		Failures:             s.c.failures.Load(),
		Timeouts:             s.c.timeouts.Load(),
		Canceled:             s.c.canceled.Load(),
		Slow:                 s.c.slow.Load(),
		Rejected:             s.c.rejected.Load(),
		FallbackTakesAllowed: s.c.takesAllowed.Load(),
		FallbackTakesDenied:  s.c.takesDenied.Load(),
		Opened:               s.c.transitions[gobreaker.StateOpen].Load(),
		HalfOpened:           s.c.transitions[gobreaker.StateHalfOpen].Load(),
		Closed:               s.c.transitions[gobreaker.StateClosed].Load(),
		Settled:              s.c.settled.Load(),
		SettleFailed:         s.c.settleFailed.Load(),
		SettleDropped:        s.c.settleDropped.Load(),
		LocalSettled:         s.c.localSettled.Load(),
	}
	st.Fallback = s.c.modes.snapshot()
	for i := range s.c.causes {
		if v := s.c.causes[i].Load(); v > 0 {
			if st.Causes == nil {
				st.Causes = make(map[string]uint64, cause.N)
			}
			st.Causes[cause.Names[i]] = v
		}
	}
	s.c.byRule.Range(func(k, v any) bool {
		if st.ByRule == nil {
			st.ByRule = make(map[string][3]ModeCount)
		}
		st.ByRule[k.(string)] = v.(*modeCounts).snapshot()
		return true
	})
	s.mu.Lock()
	st.LocalBuckets = s.local.len()
	st.Evictions = s.local.evicted
	s.mu.Unlock()
	return st
}
