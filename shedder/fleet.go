package shedder

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/internal/redisnow"
)

// Default settings of a Fleet.
const (
	// DefaultReserve is the share of fleet capacity kept for critical traffic.
	DefaultReserve = 0.20
	// DefaultFleetKey is the Redis hash holding the fleet's counts.
	DefaultFleetKey = "floodgate:shedder:fleet"
	// DefaultTTL is how long an instance's entry lives without a sync.
	DefaultTTL = 3 * time.Second
	// DefaultInterval is how often Run syncs.
	DefaultInterval = 500 * time.Millisecond
	// DefaultSyncTimeout bounds each Redis call of a sync.
	DefaultSyncTimeout = 250 * time.Millisecond
	// DefaultFleetPolicy is the Policy of a Fleet's shed Decisions.
	DefaultFleetPolicy = "fleet-shedder"

	instanceIDMaxLength = 200
)

// ErrFleetStale is returned, alongside a decision taken on this instance's
// own counts only, while the Fleet has no fleet counts younger than its TTL
// (before the first successful Sync, or when Redis has not answered for a
// TTL). The Fleet then fails open: other instances count as idle.
var ErrFleetStale = errors.New("shedder: fleet counts are stale (no successful sync within the TTL); deciding on local counts only")

//go:embed fleet.lua
var fleetLua string

var fleetScript = redisnow.Script(fleetLua)

// Fleet is the fleet-usage load shedder, a floodgate.Admitter. It keeps a
// share of the whole fleet's in-flight capacity for critical traffic (Stripe
// reserves 20%): with fleet capacity C and reserve r, a non-critical request
// starts being shed when the fleet has C × (1 − r) or more requests in
// flight, and is admitted again once the fleet falls below that minus the
// hysteresis band (5% of C by default; see WithFleetHysteresis); critical
// requests are never shed (the reserve is theirs; hard caps are package
// concurrency's job).
//
// Counts. Each instance counts its own requests in flight per priority, in
// memory. Sync (run every interval by Run) sends them to Redis in one
// script call, which stores them in a hash field named after the instance
// together with an expiry (now + TTL), deletes the fields of instances whose
// expiry has passed, and returns the sum over the other instances. The hash
// itself expires TTL after the last sync of any instance. An instance that
// dies stops refreshing its field, and its share is freed TTL later;
// Leave (called by Run when it stops) frees it at once.
//
// Staleness. Admit never calls Redis: it decides on the other instances'
// counts as of the last successful Sync plus this instance's live count. The
// other instances' part is therefore up to interval + one round trip old
// (and each of them published its count up to interval before that), so in a
// fleet ramping up fast the fleet may overshoot the threshold by what the
// other instances admitted within about two intervals. When no Sync has
// succeeded for a TTL, Fleet fails open: it forgets the other instances'
// counts and Admit returns ErrFleetStale with each decision.
//
// Adaptive capacity. With WithFleetAdaptiveCapacity each instance learns
// its own share as a Shedder learns its capacity (the capacity given to
// NewFleet is where this instance's share starts) and publishes it at every
// Sync into a second hash beside the fleet key (in its Cluster slot), which
// a Fleet of an older version never reads. The fleet capacity is this
// instance's share plus the shares the other live instances published; a
// live instance that published none (a fixed one, or an older version)
// counts as this instance's share. While the counts are stale, an adaptive
// instance counts its own share alone: it protects itself.
//
// Time. With WithFleetClock, the script takes now from that Clock, so tests can
// expire instances on fake time; without it, the script reads Redis TIME, so
// instances with skewed clocks agree on expiry.
type Fleet struct {
	localTotal  atomic.Int64
	local       [floodgate.NumPriorities]atomic.Int64
	othersTotal atomic.Int64
	others      [floodgate.NumPriorities]atomic.Int64
	lastOK      atomic.Int64 // clock Unix nanos of the last successful Sync; 0 = never
	stale       atomic.Bool
	gate        gate // non-critical: shed from gate.start, admit again below gate.stop
	verdicts

	est     atomic.Pointer[estimator] // nil: the capacity is fixed
	tickets sync.Pool                 // *ticket, adaptive capacity

	capMu       sync.Mutex // serialises capacity changes
	fixed       int64      // the fleet capacity of a fixed Fleet
	reserve     float64
	band        float64
	own         int64 // this instance's adaptive capacity
	othersCap   int64 // adaptive: the capacities other live instances published
	othersNoCap int64 // adaptive: live instances that published none
	adaptive    AdaptiveCapacity
	meter       CPUMeter
	capacityKey string

	client      redis.UniversalClient
	key         string
	instance    string
	ttl         time.Duration
	interval    time.Duration
	timeout     time.Duration
	clock       floodgate.Clock
	scriptClock floodgate.Clock // nil: the script reads Redis TIME
	dones       [floodgate.NumPriorities]floodgate.Done

	syncMu sync.Mutex
}

var _ floodgate.Admitter = (*Fleet)(nil)

// NewFleet returns a Fleet shedder for a fleet sized for capacity requests
// in flight in total (capacity >= 1), keeping its counts in client. Call Run
// in a goroutine to keep the counts fresh (or Sync yourself). It returns an
// error naming every bad option.
func NewFleet(client redis.UniversalClient, capacity int64, opts ...FleetOption) (*Fleet, error) {
	c := fleetConfig{
		common:   newCommon(DefaultFleetPolicy),
		reserve:  DefaultReserve,
		key:      DefaultFleetKey,
		ttl:      DefaultTTL,
		interval: DefaultInterval,
		timeout:  DefaultSyncTimeout,
	}
	if client == nil {
		c.errs = append(c.errs, errors.New("shedder: redis client is nil"))
	}
	if capacity < 1 {
		c.errs = append(c.errs, fmt.Errorf("shedder: fleet capacity %d must be at least 1", capacity))
	}
	if capacity > MaxCapacity {
		c.errs = append(c.errs, fmt.Errorf("shedder: fleet capacity %d must be at most MaxCapacity (%d)", capacity, int64(MaxCapacity)))
	}
	apply(&c, &c.common, "FleetOption", opts)
	if c.adaptive != nil && c.adaptive.CPUTarget > 0 && c.meter == nil {
		c.fail("WithFleetAdaptiveCapacity", "AdaptiveCapacity.CPUTarget %v needs a CPU meter (AdaptiveCapacity.CPU or WithFleetCPU)", c.adaptive.CPUTarget)
	}
	if c.instance == "" {
		id, err := randomID()
		if err != nil {
			c.errs = append(c.errs, err)
		}
		c.instance = id
	}
	if len(c.errs) > 0 {
		return nil, errors.Join(c.errs...)
	}
	f := &Fleet{
		client:      client,
		key:         c.key,
		capacityKey: capacityKey(c.key),
		instance:    c.instance,
		ttl:         c.ttl,
		interval:    c.interval,
		timeout:     c.timeout,
		clock:       c.timeSource(),
		scriptClock: c.clock,
		fixed:       capacity,
		reserve:     c.reserve,
		band:        c.hysteresis,
		meter:       c.meter,
	}
	f.verdicts.init(&c.common, capacity)
	f.gate.init(&c.common)
	f.stale.Store(true)
	for p := floodgate.PriorityTest; p <= floodgate.PriorityCritical; p++ {
		f.dones[p] = func(floodgate.Result) {
			f.local[p].Add(-1)
			f.localTotal.Add(-1)
		}
	}
	f.tickets.New = func() any {
		t := &ticket{owner: f}
		t.done = t.finish
		return t
	}
	f.relayout()
	if c.adaptive != nil {
		f.adaptive = *c.adaptive
		f.startAdaptive(f.adaptive, f.meter, capacity)
	}
	return f, nil
}

// capacityKey returns the Redis hash of the instances' adaptive
// capacities: in the fleet key's Cluster slot, and never touched by a
// Fleet of an older version sharing the fleet key.
func capacityKey(key string) string {
	if i := strings.IndexByte(key, '{'); i >= 0 {
		if j := strings.IndexByte(key[i+1:], '}'); j > 0 {
			return key + ":capacity" // the key's hash tag is kept
		}
	}
	return "{" + key + "}:capacity" // hashes like the whole fleet key
}

// startAdaptive installs an estimator of settings a for this instance's
// share, starting from initial.
func (f *Fleet) startAdaptive(a AdaptiveCapacity, meter CPUMeter, initial int64) {
	initial = min(max(initial, a.Min), a.Max)
	var e *estimator
	e = newEstimator(a, meter, initial, f.clock, func(c int64) {
		if f.est.Load() == e { // not an estimator a Reconfigure replaced (see Shedder.setFrom)
			f.setOwn(c)
		}
	})
	f.est.Store(e)
	f.setOwn(initial)
}

// setOwn records this instance's adaptive capacity.
func (f *Fleet) setOwn(c int64) {
	f.capMu.Lock()
	f.own = c
	f.capMu.Unlock()
	f.relayout()
}

// relayout recomputes the fleet capacity and the gate.
func (f *Fleet) relayout() {
	f.capMu.Lock()
	defer f.capMu.Unlock()
	capacity := f.fixed
	if f.est.Load() != nil {
		capacity = f.own
		if !f.stale.Load() {
			capacity += f.othersCap + f.othersNoCap*f.own
		}
	}
	f.capacity.Store(capacity)
	f.gate.layout(fractionOf(1-f.reserve, capacity), capacity, f.band)
}

// Capacity returns the fleet capacity in force: the one the Fleet was
// built or reconfigured with or, with an adaptive capacity, the sum of the
// live instances' learnt capacities (this instance's alone while the
// fleet counts are stale).
func (f *Fleet) Capacity() int64 { return f.capacity.Load() }

// Stats returns a snapshot of the fleet capacity and, when it is adaptive,
// of what this instance learnt its own share from (Estimate).
func (f *Fleet) Stats() Stats {
	st := Stats{CPU: -1}
	if e := f.est.Load(); e != nil {
		st = e.snapshot()
	}
	st.Capacity = f.Capacity()
	return st
}

// doneOf is Shedder.doneOf for a request of priority p admitted with
// inflight requests in flight on this instance.
func (f *Fleet) doneOf(e *estimator, p floodgate.Priority, inflight int64) floodgate.Done {
	if e == nil {
		return f.dones[p]
	}
	t := f.tickets.Get().(*ticket)
	t.e, t.p, t.gen, t.inflight, t.start = e, p, e.gen.Load(), inflight, f.clock.Now()
	return t.done
}

func (f *Fleet) release(t *ticket) {
	f.local[t.p].Add(-1)
	f.localTotal.Add(-1)
	t.e = nil
	f.tickets.Put(t)
}

// Admit implements floodgate.Admitter. It never calls Redis.
func (f *Fleet) Admit(_ context.Context, r *floodgate.Request) (floodgate.Decision, floodgate.Done, error) {
	p, err := f.priority(r)
	others := f.othersTotal.Load()
	stale := f.stale.Load()
	if !stale && others > 0 {
		// The other instances' counts are a TTL old though no Sync has
		// failed yet (one waits on a slow Redis, or none runs): decide on
		// local counts, as a failed Sync would have made it.
		if last := f.lastOK.Load(); last != 0 && f.clock.Now().UnixNano()-last >= int64(f.ttl) {
			stale, others = true, 0
		}
	}
	if stale && err == nil {
		err = ErrFleetStale
	}
	e := f.est.Load()
	if p == floodgate.PriorityCritical {
		f.local[p].Add(1)
		n := f.localTotal.Add(1)
		return f.allow(p, others+n), f.doneOf(e, p, n), err
	}
	for {
		n := f.localTotal.Load()
		total := others + n
		if f.gate.shed(total) {
			if e != nil {
				e.shed.Add(1)
			}
			return f.shed(p, total), nil, err
		}
		if f.localTotal.CompareAndSwap(n, n+1) {
			f.local[p].Add(1)
			return f.allow(p, total+1), f.doneOf(e, p, n+1), err
		}
	}
}

// Sync publishes this instance's counts to Redis, refreshes its entry's
// expiry, drops expired instances, and takes the other instances' counts for
// the next decisions. On error the previous counts stay in force until they
// are a TTL old; then the Fleet fails open (see ErrFleetStale). Sync calls
// are serialised; each is bounded by the sync timeout.
func (f *Fleet) Sync(ctx context.Context) error {
	f.syncMu.Lock()
	defer f.syncMu.Unlock()
	ctx, cancel := context.WithTimeout(ctx, f.timeout)
	defer cancel()

	args := []any{redisnow.Arg(f.scriptClock), f.ttl.Milliseconds(), f.instance, 0, 0, 0, 0, ""}
	for p := floodgate.PriorityTest; p <= floodgate.PriorityCritical; p++ {
		args[2+int(p)] = f.local[p].Load()
	}
	adaptive := f.est.Load() != nil
	if adaptive {
		f.capMu.Lock()
		args[7] = f.own
		f.capMu.Unlock()
	}
	sums, err := fleetScript.Run(ctx, f.client, []string{f.key, f.capacityKey}, args...).Int64Slice()
	if err == nil && len(sums) != 6 {
		err = fmt.Errorf("fleet script returned %d values, want 6", len(sums))
	}
	now := f.clock.Now().UnixNano()
	if err != nil {
		if last := f.lastOK.Load(); last == 0 || now-last >= int64(f.ttl) {
			f.forgetOthers()
			f.relayout()
		}
		return fmt.Errorf("shedder: fleet sync of instance %q: %w", f.instance, err)
	}
	var total int64
	for i, v := range sums[:4] {
		f.others[i+1].Store(v)
		total += v
	}
	f.othersTotal.Store(total)
	f.capMu.Lock()
	f.othersCap, f.othersNoCap = sums[4], sums[5]
	f.capMu.Unlock()
	f.lastOK.Store(now)
	f.stale.Store(false)
	f.relayout()
	return nil
}

func (f *Fleet) forgetOthers() {
	for p := range f.others {
		f.others[p].Store(0)
	}
	f.othersTotal.Store(0)
	f.stale.Store(true)
}

// Leave deletes this instance's entry from Redis, so its share is freed at
// once rather than after the TTL. Requests still in flight are no longer
// counted fleet-wide until the next Sync.
func (f *Fleet) Leave(ctx context.Context) error {
	f.syncMu.Lock()
	defer f.syncMu.Unlock()
	ctx, cancel := context.WithTimeout(ctx, f.timeout)
	defer cancel()
	if err := f.client.HDel(ctx, f.key, f.instance).Err(); err != nil {
		return fmt.Errorf("shedder: fleet leave of instance %q: %w", f.instance, err)
	}
	if err := f.client.HDel(ctx, f.capacityKey, f.instance).Err(); err != nil {
		return fmt.Errorf("shedder: fleet leave of instance %q: %w", f.instance, err)
	}
	return nil
}

// Run calls Sync at once and then every sync interval (on real time) until
// ctx is done; then it calls Leave and returns ctx's error. Each failed Sync
// or Leave is passed to onError when it is not nil.
func (f *Fleet) Run(ctx context.Context, onError func(error)) error {
	report := func(err error) {
		if err != nil && onError != nil {
			onError(err)
		}
	}
	report(f.Sync(ctx))
	t := time.NewTicker(f.interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			report(f.Leave(context.WithoutCancel(ctx)))
			return ctx.Err()
		case <-t.C:
			report(f.Sync(ctx))
		}
	}
}
