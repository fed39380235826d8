package shedder

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/floodgate-go/floodgate"
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

var fleetScript = redis.NewScript(fleetLua)

// WithReserve sets the share of fleet capacity, in (0, 1), kept for
// critical traffic: non-critical requests are shed when the fleet's in-flight
// count reaches (1 − reserve) × capacity. Default 0.20.
func WithReserve(share float64) Option {
	return func(o *options) {
		o.fleetOnly = append(o.fleetOnly, "WithReserve")
		if !(share > 0 && share < 1) {
			o.fail("reserve %v is out of range (0, 1)", share)
		}
		o.reserve = share
	}
}

// WithInstanceID names this instance in Redis (default: 16 random hex
// digits). Two live instances must never share an ID.
func WithInstanceID(id string) Option {
	return func(o *options) {
		o.fleetOnly = append(o.fleetOnly, "WithInstanceID")
		if id == "" || len(id) > instanceIDMaxLength {
			o.fail("instance ID %q must have 1 to %d bytes", id, instanceIDMaxLength)
		}
		o.instance = id
	}
}

// WithFleetKey sets the Redis key (a hash) holding the fleet's counts,
// DefaultFleetKey by default. Services sharing one Redis need distinct keys.
func WithFleetKey(key string) Option {
	return func(o *options) {
		o.fleetOnly = append(o.fleetOnly, "WithFleetKey")
		if key == "" {
			o.fail("fleet key is empty")
		}
		o.prefix = key
	}
}

// WithSync sets how often Run publishes this instance's counts and reads the
// fleet's (interval), how long an instance's entry lives without a refresh
// (ttl; a dead instance's share is freed after it), and the timeout of each
// Redis call. They must satisfy 0 < interval < ttl and timeout > 0.
// Defaults: 500ms, 3s, 250ms.
func WithSync(interval, ttl, timeout time.Duration) Option {
	return func(o *options) {
		o.fleetOnly = append(o.fleetOnly, "WithSync")
		if interval <= 0 || ttl <= interval {
			o.fail("sync interval %s and ttl %s must satisfy 0 < interval < ttl", interval, ttl)
		}
		if ttl%time.Millisecond != 0 {
			o.fail("sync ttl %s is not a whole number of milliseconds", ttl)
		}
		if timeout <= 0 {
			o.fail("sync timeout %s must be positive", timeout)
		}
		o.interval, o.ttl, o.timeout = interval, ttl, timeout
	}
}

// Fleet is the fleet-usage load shedder, a floodgate.Admitter. It keeps a
// share of the whole fleet's in-flight capacity for critical traffic (Stripe
// reserves 20%): with fleet capacity C and reserve r, a non-critical request
// starts being shed when the fleet has C × (1 − r) or more requests in
// flight, and is admitted again once the fleet falls below that minus the
// hysteresis band (5% of C by default; see WithHysteresis); critical
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
// Time. With WithClock, the script takes now from that Clock, so tests can
// expire instances on fake time; without it, the script reads Redis TIME, so
// instances with skewed clocks agree on expiry.
type Fleet struct {
	localTotal  atomic.Int64
	local       [floodgate.NumPriorities]atomic.Int64
	othersTotal atomic.Int64
	others      [floodgate.NumPriorities]atomic.Int64
	lastOK      atomic.Int64 // clock Unix nanos of the last successful Sync; 0 = never
	stale       atomic.Bool
	gate        gate // non-critical: shed from limit, admit again below limit - band

	client          redis.UniversalClient
	key             string
	instance        string
	capacity        int64
	limit           int64 // non-critical shed when fleet in flight >= limit
	ttl             time.Duration
	interval        time.Duration
	timeout         time.Duration
	retryAfter      time.Duration
	defaultPriority floodgate.Priority
	clock           floodgate.Clock
	redisTime       bool // the script reads Redis TIME instead of an argument
	policy          string
	dones           [floodgate.NumPriorities]floodgate.Done

	syncMu sync.Mutex
}

var _ floodgate.Admitter = (*Fleet)(nil)

// NewFleet returns a Fleet shedder for a fleet sized for capacity requests
// in flight in total (capacity >= 1), keeping its counts in client. Call Run
// in a goroutine to keep the counts fresh (or Sync yourself). It returns an
// error naming every bad option.
func NewFleet(client redis.UniversalClient, capacity int64, opts ...Option) (*Fleet, error) {
	o := defaultOptions()
	o.policy = DefaultFleetPolicy
	o.reserve = DefaultReserve
	o.prefix = DefaultFleetKey
	o.ttl, o.interval, o.timeout = DefaultTTL, DefaultInterval, DefaultSyncTimeout
	clockGiven := false
	for _, opt := range opts {
		before := o.clock
		opt(&o)
		if o.clock != before {
			clockGiven = true
		}
	}
	var errs []error
	if client == nil {
		errs = append(errs, errors.New("shedder: redis client is nil"))
	}
	if capacity < 1 {
		errs = append(errs, fmt.Errorf("shedder: fleet capacity %d must be at least 1", capacity))
	}
	errs = append(errs, o.errs...)
	if len(o.shedderOnly) > 0 {
		errs = append(errs, fmt.Errorf("shedder: options %v apply only to New", o.shedderOnly))
	}
	if o.instance == "" {
		id, err := randomID()
		if err != nil {
			errs = append(errs, err)
		}
		o.instance = id
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	f := &Fleet{
		client:          client,
		key:             o.prefix,
		instance:        o.instance,
		capacity:        capacity,
		limit:           fractionOf(1-o.reserve, capacity),
		ttl:             o.ttl,
		interval:        o.interval,
		timeout:         o.timeout,
		retryAfter:      o.retryAfter,
		defaultPriority: o.defaultPriority,
		clock:           o.clock,
		redisTime:       !clockGiven,
		policy:          o.policy,
	}
	f.gate.init(f.limit, capacity, o)
	f.stale.Store(true)
	for p := floodgate.PriorityTest; p <= floodgate.PriorityCritical; p++ {
		f.dones[p] = func() {
			f.local[p].Add(-1)
			f.localTotal.Add(-1)
		}
	}
	return f, nil
}

// InstanceID returns the name of this instance's entry in Redis.
func (f *Fleet) InstanceID() string { return f.instance }

// Threshold returns the fleet in-flight count from which non-critical
// requests are shed, capacity × (1 − reserve) rounded up, and the count
// below which shedding stops again (the hysteresis band below it).
func (f *Fleet) Threshold() (start, stop int64) { return f.gate.start, f.gate.stop }

// Shedding reports whether non-critical requests are currently shed.
func (f *Fleet) Shedding() bool { return f.gate.shedding() }

// LocalInFlight returns this instance's requests in flight of priority p
// (PriorityUnspecified: the total over all priorities).
func (f *Fleet) LocalInFlight(p floodgate.Priority) int64 {
	if p == floodgate.PriorityUnspecified || !p.Valid() {
		return f.localTotal.Load()
	}
	return f.local[p].Load()
}

// OthersInFlight returns the other instances' requests in flight of
// priority p (PriorityUnspecified: the total) as of the last successful
// Sync, or 0 while the counts are stale.
func (f *Fleet) OthersInFlight(p floodgate.Priority) int64 {
	if p == floodgate.PriorityUnspecified || !p.Valid() {
		return f.othersTotal.Load()
	}
	return f.others[p].Load()
}

// Stale reports whether the Fleet currently decides on local counts only.
func (f *Fleet) Stale() bool { return f.stale.Load() }

func (f *Fleet) resolve(p floodgate.Priority) floodgate.Priority {
	if p == floodgate.PriorityUnspecified || !p.Valid() {
		return f.defaultPriority
	}
	return p
}

// Admit implements floodgate.Admitter. It never calls Redis.
func (f *Fleet) Admit(_ context.Context, r *floodgate.Request) (floodgate.Decision, floodgate.Done, error) {
	var err error
	p := r.Priority
	if !p.Valid() {
		err = ErrInvalidPriority
	}
	p = f.resolve(p)
	if f.stale.Load() && err == nil {
		err = ErrFleetStale
	}
	others := f.othersTotal.Load()
	if p == floodgate.PriorityCritical {
		f.local[p].Add(1)
		n := f.localTotal.Add(1)
		return f.allow(p, others+n), f.dones[p], err
	}
	for {
		n := f.localTotal.Load()
		total := others + n
		if f.gate.shed(total) {
			return floodgate.Decision{
				Allowed:    false,
				Stage:      floodgate.StageShedder,
				Source:     floodgate.SourceShedder,
				Policy:     f.policy,
				Limit:      f.capacity,
				Remaining:  max(f.capacity-total, 0),
				RetryAfter: f.retryAfter,
				Priority:   p,
			}, nil, err
		}
		if f.localTotal.CompareAndSwap(n, n+1) {
			f.local[p].Add(1)
			return f.allow(p, total+1), f.dones[p], err
		}
	}
}

func (f *Fleet) allow(p floodgate.Priority, total int64) floodgate.Decision {
	return floodgate.Decision{
		Allowed:   true,
		Stage:     floodgate.StageShedder,
		Source:    floodgate.SourceShedder,
		Limit:     f.capacity,
		Remaining: max(f.capacity-total, 0),
		Priority:  p,
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

	nowArg := ""
	if !f.redisTime {
		nowArg = strconv.FormatInt(f.clock.Now().UnixMilli(), 10)
	}
	args := []any{nowArg, f.ttl.Milliseconds(), f.instance, 0, 0, 0, 0}
	for p := floodgate.PriorityTest; p <= floodgate.PriorityCritical; p++ {
		args[2+int(p)] = f.local[p].Load()
	}
	sums, err := fleetScript.Run(ctx, f.client, []string{f.key}, args...).Int64Slice()
	if err == nil && len(sums) != 4 {
		err = fmt.Errorf("fleet script returned %d values, want 4", len(sums))
	}
	now := f.clock.Now().UnixNano()
	if err != nil {
		if last := f.lastOK.Load(); last == 0 || now-last >= int64(f.ttl) {
			f.forgetOthers()
		}
		return fmt.Errorf("shedder: fleet sync of instance %q: %w", f.instance, err)
	}
	var total int64
	for i, v := range sums {
		f.others[i+1].Store(v)
		total += v
	}
	f.othersTotal.Store(total)
	f.lastOK.Store(now)
	f.stale.Store(false)
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
