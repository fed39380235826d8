package fleetconc

import (
	"context"
	"crypto/rand"
	_ "embed"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/concurrency"
	"github.com/floodgate-go/floodgate/internal/failover"
	"github.com/floodgate-go/floodgate/internal/redisnow"
)

// Defaults of a fleet cap (PerKey says each).
const (
	// defaultPrefix starts every fleet cap's Redis keys.
	defaultPrefix = "floodgate:concurrency:"
	// defaultLease is how long a fleet slot lives without Done or renewal.
	defaultLease = 30 * time.Second
	// defaultTimeout bounds each Redis call of a fleet cap.
	defaultTimeout = 250 * time.Millisecond
	// minLease is the shortest lease a fleet cap accepts.
	minLease = 10 * time.Millisecond
)

// PerKey describes a per-key cap across every instance sharing one Redis,
// for WithPerKey. The zero value of an optional field is its default; New
// reports a bad field by its name.
type PerKey struct {
	// Name is the cap's policy name. Required: it must be non-empty, must
	// not contain ':' and must differ from every other fleet cap's name. It
	// is part of the Redis key, so instances of one service must agree on
	// it.
	Name string
	// Cap is the most requests in flight per key, fleet-wide. Required: at
	// least 1.
	Cap int64
	// Key computes the key a request is counted under, as
	// concurrency.PerKey.Key does (ok false: the cap does not apply to
	// r). Required: nil is an error.
	Key func(r *floodgate.Request) (key string, ok bool)
	// Client is the Redis client. Required: nil is an error. Each key is
	// one Redis key, so Redis Cluster works too.
	Client redis.UniversalClient
	// Prefix starts every Redis key; "" means "floodgate:concurrency:". The full key
	// is Prefix + Name + ":" + key; Name has no ':', so no key can collide
	// with another cap's.
	Prefix string
	// Lease is how long a slot lives without Done or renewal: a crashed
	// instance's slots are freed after it. 0 means 30s; otherwise it
	// must be at least 10ms and whole milliseconds.
	Lease time.Duration
	// Timeout bounds each Redis call; 0 means 250ms. It must not
	// be negative.
	Timeout time.Duration
	// FailClosed makes the cap deny (SourceFailClosed, with RetryAfter)
	// when Redis cannot answer. By default it fails open: the request is
	// admitted without a fleet slot (SourceFailOpen).
	FailClosed bool
	// RetryAfter is the RetryAfter of the cap's denials; 0 means
	// concurrency.DefaultRetryAfter. It must not be negative.
	RetryAfter time.Duration
}

// Option configures New; New reports every bad one.
type Option func(*config)

// config is what Options set; errs collects their errors.
type config struct {
	caps  []*fleetLimit
	clock floodgate.Clock // nil: the scripts read Redis TIME
	wait  concurrency.Wait
	errs  []error
}

func (o *config) fail(option, format string, args ...any) {
	o.errs = append(o.errs, errors.New("fleetconc: "+option+": "+fmt.Sprintf(format, args...)))
}

// WithPerKey adds a fleet-wide per-key cap kept in Redis. A Limiter holds
// at most concurrency.MaxPerKeyCaps of them.
func WithPerKey(c PerKey) Option {
	return func(o *config) {
		bad := func(field, format string, args ...any) {
			msg := "PerKey." + field + " " + fmt.Sprintf(format, args...)
			if c.Name != "" {
				msg += fmt.Sprintf(" (cap %q)", c.Name)
			}
			o.fail("WithPerKey", "%s", msg)
		}
		switch {
		case c.Name == "":
			o.fail("WithPerKey", "PerKey.Name is empty")
		case strings.Contains(c.Name, ":"):
			o.fail("WithPerKey", "PerKey.Name %q contains ':'", c.Name)
		}
		if c.Cap < 1 {
			bad("Cap", "%d must be >= 1", c.Cap)
		}
		if c.Key == nil {
			bad("Key", "is nil")
		}
		if c.Client == nil {
			bad("Client", "is nil")
		}
		if c.Prefix == "" {
			c.Prefix = defaultPrefix
		}
		if c.Lease == 0 {
			c.Lease = defaultLease
		}
		if c.Lease < minLease || c.Lease%time.Millisecond != 0 {
			bad("Lease", "%s must be at least %s and whole milliseconds", c.Lease, minLease)
		}
		if c.Timeout == 0 {
			c.Timeout = defaultTimeout
		}
		if c.Timeout < 0 {
			bad("Timeout", "%s is negative", c.Timeout)
		}
		if c.RetryAfter == 0 {
			c.RetryAfter = concurrency.DefaultRetryAfter
		}
		if c.RetryAfter < 0 {
			bad("RetryAfter", "%s is negative", c.RetryAfter)
		}
		o.caps = append(o.caps, &fleetLimit{
			name: c.Name, cap: c.Cap, key: c.Key, client: c.Client,
			prefix: c.Prefix + c.Name + ":", leaseMs: c.Lease.Milliseconds(),
			timeout: c.Timeout, failClosed: c.FailClosed, retryAfter: c.RetryAfter,
		})
	}
}

// WithClock sets the Clock for the leases: the acquire and renew scripts
// then take now from it instead of Redis TIME, so tests can expire leases
// on fake time.
func WithClock(c floodgate.Clock) Option {
	return func(o *config) {
		if c == nil {
			o.fail("WithClock", "clock is nil")
			return
		}
		o.clock = c
	}
}

// Limiter holds fleet-wide per-key caps, a floodgate.Admitter. It is safe
// for concurrent use. See the package documentation.
type Limiter struct {
	fleet []*fleetLimit
	fleetState
	wait waitQueue // requests waiting for a fleet slot (WithWait)
}

var _ floodgate.Admitter = (*Limiter)(nil)

// New returns a Limiter with the given fleet caps; at least one is
// required. It returns an error naming every bad option.
func New(opts ...Option) (*Limiter, error) {
	var o config
	for _, opt := range opts {
		if opt == nil {
			o.errs = append(o.errs, errors.New("fleetconc: nil Option"))
			continue
		}
		opt(&o)
	}
	if len(o.caps) == 0 {
		o.errs = append(o.errs, errors.New("fleetconc: no cap configured (use WithPerKey)"))
	}
	if len(o.caps) > concurrency.MaxPerKeyCaps {
		o.fail("WithPerKey", "%d fleet per-key caps, at most %d", len(o.caps), concurrency.MaxPerKeyCaps)
	}
	seen := map[string]bool{}
	for _, c := range o.caps {
		if c.name != "" && seen[c.name] {
			o.fail("WithPerKey", "cap name %q is used twice", c.name)
		}
		seen[c.name] = true
	}
	if len(o.errs) > 0 {
		return nil, errors.Join(o.errs...)
	}
	l := &Limiter{fleet: o.caps, wait: waitQueue{cfg: o.wait, clock: o.clock}}
	if err := l.fleetState.init(&o); err != nil {
		return nil, err
	}
	return l, nil
}

//go:embed acquire.lua
var acquireLua string

//go:embed renew.lua
var renewLua string

var (
	acquireScript = redisnow.Script(acquireLua)
	renewScript   = redisnow.Script(renewLua)
)

type fleetLimit struct {
	name       string
	cap        int64
	key        func(*floodgate.Request) (string, bool)
	client     redis.UniversalClient
	prefix     string // Prefix + Name + ":"
	leaseMs    int64
	timeout    time.Duration
	failClosed bool
	retryAfter time.Duration
}

// fleetState is what a Limiter keeps besides its caps.
type fleetState struct {
	instance string          // 16 random hex digits: the prefix of this Limiter's slot IDs
	clock    floodgate.Clock // nil: the scripts read Redis TIME
	seq      atomic.Uint64
	heldMu   sync.Mutex
	held     map[*fleetTicket]struct{}

	// orphans are slots an acquire may have added though its reply never
	// came (see orphan); orphaning says a goroutine removes them.
	orphanMu  sync.Mutex
	orphans   []orphan
	orphaning bool
}

// orphan is a slot to remove from Redis once it is there, until its lease
// would have ended anyway.
type orphan struct {
	s     slot
	until time.Time
}

// maxOrphans bounds the orphans waiting for removal (past it, a slot is
// left to its lease); orphanEvery is how often their removal is tried.
const (
	maxOrphans  = 4096
	orphanEvery = 50 * time.Millisecond
)

// orphan hands s, a slot whose acquire failed without an answer (a
// timeout, a cancelled caller: Redis may still run it, later), to a
// background removal. A plain ZREM now could run before the stalled
// acquire and leave its slot to count against the cap, held by no
// request, for a whole lease; so s is removed once Redis says it removed
// it, or dropped when its lease would have ended.
func (l *Limiter) orphan(s slot) {
	l.orphanMu.Lock()
	defer l.orphanMu.Unlock()
	if len(l.orphans) >= maxOrphans {
		return
	}
	l.orphans = append(l.orphans, orphan{s: s, until: time.Now().Add(time.Duration(s.fl.leaseMs) * time.Millisecond)})
	if !l.orphaning {
		l.orphaning = true
		go l.removeOrphans()
	}
}

// removeOrphans tries, every orphanEvery, to remove the orphaned slots,
// until none is left.
func (l *Limiter) removeOrphans() {
	t := time.NewTicker(orphanEvery)
	defer t.Stop()
	for range t.C {
		l.orphanMu.Lock()
		batch := l.orphans
		l.orphans = nil
		l.orphanMu.Unlock()
		var keep []orphan
		now := time.Now()
		for _, o := range batch {
			if now.After(o.until) {
				continue
			}
			ctx, cancel := context.WithTimeout(context.Background(), o.s.fl.timeout)
			n, err := o.s.fl.client.ZRem(ctx, o.s.key, o.s.id).Result()
			cancel()
			failover.Follow(o.s.fl.client, err)
			if err != nil || n == 0 {
				keep = append(keep, o) // not there (yet), or Redis did not answer
			}
		}
		l.orphanMu.Lock()
		l.orphans = append(keep, l.orphans...)
		if len(l.orphans) == 0 {
			l.orphaning = false
			l.orphanMu.Unlock()
			return
		}
		l.orphanMu.Unlock()
	}
}

func (s *fleetState) init(o *config) error {
	s.clock = o.clock
	s.held = make(map[*fleetTicket]struct{})
	var b [8]byte
	if _, err := rand.Read(b[:]); err != nil {
		return fmt.Errorf("fleetconc: generating an instance ID: %w", err)
	}
	s.instance = hex.EncodeToString(b[:])
	return nil
}

// slot is one fleet slot a request holds.
type slot struct {
	fl  *fleetLimit
	key string // Redis key
	id  string
}

// fleetTicket is the Done of a request that holds fleet slots. It is
// allocated per request and idempotent.
type fleetTicket struct {
	l        *Limiter
	slots    []slot
	unsure   []slot // acquired without an answer: orphaned on release
	released atomic.Bool
}

// binding tracks the cap with the least room left among those taken.
type binding struct {
	policy    string
	limit     int64
	remaining int64
	set       bool
}

func (b *binding) offer(policy string, limit, remaining int64) {
	if !b.set || remaining < b.remaining {
		*b = binding{policy: policy, limit: limit, remaining: remaining, set: true}
	}
}

// Admit implements floodgate.Admitter: it takes a slot of every cap whose
// Key applies to r, in option order, and denies at the first cap that is
// full, releasing the slots already taken.
func (l *Limiter) Admit(ctx context.Context, r *floodgate.Request) (floodgate.Decision, floodgate.Done, error) {
	var (
		b      binding
		opened binding // the first cap that admitted without a slot
		slots  []slot
		errs   []error
		src    = floodgate.SourceConcurrency
	)
	var unsure []slot             // acquires that failed without an answer (failing open)
	var deadline <-chan time.Time // the end of the request's wait for slots (WithWait)
	for _, fl := range l.fleet {
		key, ok := fl.key(r)
		if !ok {
			continue
		}
		if gone := ctx.Err(); gone != nil {
			// The caller left before this cap was asked: nothing is sent.
			return l.callerGone(r, fl, slots, unsure, gone, errs)
		}
		s := slot{fl: fl, key: fl.prefix + key, id: l.instance + ":" + strconv.FormatUint(l.seq.Add(1), 36)}
		n, got, gone, err := l.acquire(ctx, s)
		if !got && gone == nil && err == nil && l.wait.enabled() {
			if deadline == nil { // one wait for all the request's caps
				var stop func()
				deadline, stop = l.wait.after(l.wait.cfg.Max)
				defer stop()
			}
			var cut bool
			if n, got, gone, err, cut = l.waitSlot(ctx, r, s, deadline); gone != nil && !cut {
				return l.callerGone(r, fl, slots, unsure, gone, errs)
			}
		}
		if gone != nil {
			// The caller's context ended, not Redis: no fail mode
			// applies. Redis may still run the acquire: orphan it.
			return l.callerGone(r, fl, slots, append(unsure, s), gone, errs)
		}
		if err != nil {
			err = fmt.Errorf("fleetconc: cap %q: %w", fl.name, err)
			errs = append(errs, err)
			if fl.failClosed {
				l.removeSlots(slots)
				for _, u := range append(unsure, s) {
					l.orphan(u)
				}
				return l.deny(r, fl, floodgate.SourceFailClosed), nil, errors.Join(errs...)
			}
			// Admitted without the slot; the request's Done orphans it.
			unsure = append(unsure, s)
			src = floodgate.SourceFailOpen
			if !opened.set {
				opened = binding{policy: fl.name, limit: fl.cap, remaining: fl.cap, set: true}
			}
			continue
		}
		if !got {
			l.removeSlots(slots)
			for _, u := range unsure {
				l.orphan(u)
			}
			return l.deny(r, fl, floodgate.SourceConcurrency), nil, errors.Join(errs...)
		}
		slots = append(slots, s)
		b.offer(fl.name, fl.cap, fl.cap-n)
	}
	if !b.set {
		b = opened // the decision names the cap that failed open
	}
	d := floodgate.Decision{
		Allowed:   true,
		Stage:     floodgate.StageConcurrency,
		Source:    src,
		Policy:    b.policy,
		Limit:     b.limit,
		Remaining: b.remaining,
		Priority:  r.Priority,
	}
	err := errors.Join(errs...)
	if len(slots) == 0 && len(unsure) == 0 {
		return d, nil, err
	}
	t := &fleetTicket{l: l, slots: slots, unsure: unsure}
	l.heldMu.Lock()
	l.held[t] = struct{}{}
	l.heldMu.Unlock()
	return d, t.release, err
}

func (l *Limiter) deny(r *floodgate.Request, fl *fleetLimit, src floodgate.Source) floodgate.Decision {
	return floodgate.Decision{
		Allowed:    false,
		Stage:      floodgate.StageConcurrency,
		Source:     src,
		Policy:     fl.name,
		Limit:      fl.cap,
		Remaining:  0,
		RetryAfter: fl.retryAfter,
		Priority:   r.Priority,
	}
}

// callerGone denies r because the caller's context ended (gone is its
// error) while cap fl was being asked: it removes the slots already taken,
// orphans those whose acquire may still run in Redis, and returns the
// context's error with the errors of the caps before.
func (l *Limiter) callerGone(r *floodgate.Request, fl *fleetLimit, slots, unsure []slot, gone error, errs []error) (floodgate.Decision, floodgate.Done, error) {
	l.removeSlots(slots)
	for _, u := range unsure {
		l.orphan(u)
	}
	d := l.deny(r, fl, floodgate.SourceConcurrency)
	d.RetryAfter = 0 // the request is gone; no wait would admit it
	errs = append(errs, fmt.Errorf("fleetconc: cap %q: the request's context ended before Redis answered: %w", fl.name, gone))
	return d, nil, errors.Join(errs...)
}

// acquire asks Redis for slot s within the cap's Timeout. It returns the
// caller's context's error as gone when the call failed because that
// context ended (it was cancelled, or its own deadline, earlier than the
// Timeout, passed), and the call's error as err when Redis failed or the
// Timeout ran out.
func (l *Limiter) acquire(ctx context.Context, s slot) (n int64, got bool, gone, err error) {
	cctx, cancel := context.WithTimeout(ctx, s.fl.timeout)
	defer cancel()
	res, err := acquireScript.Run(cctx, s.fl.client, []string{s.key}, redisnow.Arg(l.clock), s.fl.leaseMs, s.fl.cap, s.id).Int64Slice()
	if err != nil {
		gone := callerErr(ctx, cctx)
		if gone == nil {
			failover.Follow(s.fl.client, err)
		}
		return 0, false, gone, err
	}
	if len(res) != 2 {
		return 0, false, nil, fmt.Errorf("acquire script returned %d values, want 2", len(res))
	}
	return res[1], res[0] == 1, nil, nil
}

// callerErr reports whether a call made with cctx, derived from the
// caller's ctx, failed because ctx ended: it returns ctx's error, or
// context.DeadlineExceeded when the call's deadline was ctx's own and has
// passed (a network read can time out on it a moment before ctx's timer
// fires). It returns nil when the call's own timeout, not the caller, cut
// it short, or ctx is still live.
func callerErr(ctx, cctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	d, ok := ctx.Deadline()
	if !ok {
		return nil
	}
	if cd, _ := cctx.Deadline(); d.After(cd) || time.Now().Before(d) {
		return nil
	}
	return context.DeadlineExceeded
}

// release is the Done of a request holding fleet slots: the first call
// removes its slots from Redis; later calls do nothing.
func (t *fleetTicket) release(floodgate.Result) {
	if !t.released.CompareAndSwap(false, true) {
		return
	}
	l := t.l
	l.heldMu.Lock()
	delete(l.held, t)
	l.heldMu.Unlock()
	l.removeSlots(t.slots)
	for _, s := range t.unsure {
		l.orphan(s)
	}
}

// removeSlots deletes slots from Redis. A failure leaves the slot to expire
// with its lease.
func (l *Limiter) removeSlots(slots []slot) {
	for _, s := range slots {
		ctx, cancel := context.WithTimeout(context.Background(), s.fl.timeout)
		_ = s.fl.client.ZRem(ctx, s.key, s.id).Err()
		cancel()
		if l.wait.enabled() {
			l.wait.freed(s.key) // a request waiting here for the key asks now
		}
	}
}

// Renew extends the lease of every fleet slot held by a request still in
// flight on this instance to now + lease, in one pipeline per fleet cap. A
// slot that already expired (and may have been given to another request) is
// not re-added.
func (l *Limiter) Renew(ctx context.Context) error {
	byCap := make(map[*fleetLimit][]slot, len(l.fleet))
	l.heldMu.Lock()
	for t := range l.held {
		for _, s := range t.slots {
			byCap[s.fl] = append(byCap[s.fl], s)
		}
	}
	l.heldMu.Unlock()
	var errs []error
	for fl, slots := range byCap {
		cctx, cancel := context.WithTimeout(ctx, fl.timeout)
		_, err := fl.client.Pipelined(cctx, func(p redis.Pipeliner) error {
			for _, s := range slots {
				renewScript.Eval(cctx, p, []string{s.key}, redisnow.Arg(l.clock), fl.leaseMs, s.id)
			}
			return nil
		})
		cancel()
		if err != nil {
			failover.Follow(fl.client, err)
			errs = append(errs, fmt.Errorf("fleetconc: renewing %d slots of cap %q: %w", len(slots), fl.name, err))
		}
	}
	return errors.Join(errs...)
}

// Run calls Renew every third of the shortest lease (on real time) until
// ctx is done, then returns ctx's error. Each failed Renew is passed to
// onError when it is not nil.
func (l *Limiter) Run(ctx context.Context, onError func(error)) error {
	every := time.Duration(l.fleet[0].leaseMs) * time.Millisecond
	for _, fl := range l.fleet[1:] {
		every = min(every, time.Duration(fl.leaseMs)*time.Millisecond)
	}
	t := time.NewTicker(every / 3)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
			if err := l.Renew(ctx); err != nil && onError != nil {
				onError(err)
			}
		}
	}
}
