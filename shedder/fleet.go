package shedder

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
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
	apply(&c, &c.common, "FleetOption", opts)
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
		verdicts:    c.verdicts(capacity),
		client:      client,
		key:         c.key,
		instance:    c.instance,
		ttl:         c.ttl,
		interval:    c.interval,
		timeout:     c.timeout,
		clock:       c.timeSource(),
		scriptClock: c.clock,
	}
	f.gate.init(fractionOf(1-c.reserve, capacity), capacity, &c.common)
	f.stale.Store(true)
	for p := floodgate.PriorityTest; p <= floodgate.PriorityCritical; p++ {
		f.dones[p] = func(floodgate.Result) {
			f.local[p].Add(-1)
			f.localTotal.Add(-1)
		}
	}
	return f, nil
}

// Admit implements floodgate.Admitter. It never calls Redis.
func (f *Fleet) Admit(_ context.Context, r *floodgate.Request) (floodgate.Decision, floodgate.Done, error) {
	p, err := f.priority(r)
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
			return f.shed(p, total), nil, err
		}
		if f.localTotal.CompareAndSwap(n, n+1) {
			f.local[p].Add(1)
			return f.allow(p, total+1), f.dones[p], err
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

	args := []any{redisnow.Arg(f.scriptClock), f.ttl.Milliseconds(), f.instance, 0, 0, 0, 0}
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
