package fleetshed

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/fleet"
	"github.com/floodgate-go/floodgate/internal/failover"
	"github.com/floodgate-go/floodgate/internal/fair"
	"github.com/floodgate-go/floodgate/internal/liveness"
	"github.com/floodgate-go/floodgate/internal/redisnow"
	"github.com/floodgate-go/floodgate/internal/reqctx"
	"github.com/floodgate-go/floodgate/shedder"
	"github.com/floodgate-go/floodgate/shedder/internal/core"
)

// Defaults of a Shedder (Config says each).
const (
	// defaultReserve is the share of fleet capacity kept for critical
	// traffic.
	defaultReserve = 0.20
	// defaultPolicy is the Policy of a Shedder's shed Decisions.
	defaultPolicy = "fleet-shedder"
)

// ErrStale is returned, alongside a decision taken on this instance's own
// counts only, while the Shedder has no fleet counts younger than the
// Members' TTL (before the first successful Sync, or when Redis has not
// answered for a TTL). The Shedder then fails open: other instances count
// as idle.
var ErrStale = errors.New("fleetshed: fleet counts are stale (no successful sync within the TTL); deciding on local counts only")

//go:embed sync.lua
var syncLua string

var syncScript = redisnow.Script(liveness.BeatLua + syncLua)

// Shedder is the fleet-usage load shedder, a floodgate.Admitter. It keeps a
// share of the whole fleet's in-flight capacity for critical traffic (Stripe
// reserves 20%): with fleet capacity C and reserve r, a non-critical request
// starts being shed when the fleet has C × (1 − r) or more requests in
// flight, and is admitted again once the fleet falls below that minus the
// hysteresis band (shedder.DefaultHysteresis, 5% of C); critical
// requests are never shed (the reserve is theirs; hard caps are package
// concurrency's job). It is safe for concurrent use.
type Shedder struct {
	localTotal  atomic.Int64
	local       [floodgate.NumPriorities]atomic.Int64
	othersTotal atomic.Int64
	others      [floodgate.NumPriorities]atomic.Int64
	lastOK      atomic.Int64 // clock Unix nanos of the last successful Sync; 0 = never
	stale       atomic.Bool
	gate        core.Gate // non-critical: shed from its start, admit again below its stop
	v           core.Verdicts

	est     atomic.Pointer[core.Estimator] // nil: the capacity is fixed
	tickets sync.Pool                      // *core.Ticket, adaptive capacity

	capMu       sync.Mutex // serialises capacity changes
	fixed       int64      // the fleet capacity of a fixed Shedder
	reserve     float64
	band        float64
	own         int64 // this instance's adaptive capacity
	othersCap   int64 // adaptive: the capacities other live instances published
	othersNoCap int64 // adaptive: live instances that published none
	adaptive    shedder.AdaptiveCapacity
	meter       core.CPUMeter
	mem         core.CPUMeter

	m     liveness.Member
	keys  []string // member set, counts hash, capacity hash
	clock floodgate.Clock
	dones [floodgate.NumPriorities]floodgate.Done

	live atomic.Int64 // live instances at the last Sync; 1 while stale
	fair fair.InForce // Config.Fairness

	syncMu sync.Mutex
}

var _ floodgate.Admitter = (*Shedder)(nil)

// New returns a fleet-usage Shedder for a fleet sized for capacity
// requests in flight in total (capacity >= 1), whose instances are counted
// by members: its instance ID, Redis client, member set, heartbeat
// interval, TTL, call timeout and Clock are the Shedder's too. members must
// count from Redis (not fleet.WithStatic), and its key must keep the keys
// derived from it in its Redis Cluster slot: a hash tag ({tag}, not empty)
// or no '}' at all. Its reserve is 0.20 and its capacity fixed until
// Reconfigure sets a Config (a policy file's shedder: fleet: section).
// Call Run in a goroutine to keep the counts fresh (or Sync yourself). New
// returns an error naming every bad argument.
func New(members *fleet.Members, capacity int64) (*Shedder, error) {
	c := core.NewSettings("fleetshed", defaultPolicy)
	m, ok := liveness.Lookup(members)
	switch {
	case members == nil:
		c.Errorf("fleet members is nil")
	case !ok:
		c.Errorf("fleet members count statically (fleet.WithStatic): there is no member set to share counts in")
	case !clusterSafeKey(m.Key):
		c.Errorf("fleet key %q has a '}' but no hash tag ({tag}, not empty): on Redis Cluster its keys would hash to different slots", m.Key)
	}
	if capacity < 1 {
		c.Errorf("fleet capacity %d must be at least 1", capacity)
	}
	if capacity > shedder.MaxCapacity {
		c.Errorf("fleet capacity %d must be at most MaxCapacity (%d)", capacity, int64(shedder.MaxCapacity))
	}
	if ok {
		c.Clock = m.Clock
	}
	if len(c.Errs) > 0 {
		return nil, errors.Join(c.Errs...)
	}
	s := &Shedder{
		m:       m,
		keys:    []string{m.Key, derivedKey(m.Key, "shed"), derivedKey(m.Key, "shed:capacity")},
		clock:   c.TimeSource(),
		fixed:   capacity,
		reserve: defaultReserve,
		band:    c.Hysteresis,
	}
	s.v.Init(&c, capacity)
	s.gate.Init(&c)
	s.stale.Store(true)
	s.live.Store(1)
	for p := floodgate.PriorityTest; p <= floodgate.PriorityCritical; p++ {
		s.dones[p] = func(floodgate.Result) {
			s.local[p].Add(-1)
			s.localTotal.Add(-1)
		}
	}
	s.tickets.New = func() any { return core.NewTicket(s.release) }
	s.relayout()
	return s, nil
}

// derivedKey returns a key beside the member set key, in its Redis Cluster
// slot: the key's hash tag is kept, or the whole key becomes one.
func derivedKey(key, suffix string) string {
	if i := strings.IndexByte(key, '{'); i >= 0 {
		if j := strings.IndexByte(key[i+1:], '}'); j > 0 {
			return key + ":" + suffix // the key's hash tag is kept
		}
	}
	return "{" + key + "}:" + suffix // hashes like the whole member set key
}

// clusterSafeKey reports whether key and the keys derived from it hash to
// one Redis Cluster slot: it has a hash tag, or no '}' at all.
func clusterSafeKey(key string) bool {
	if i := strings.IndexByte(key, '{'); i >= 0 {
		if j := strings.IndexByte(key[i+1:], '}'); j > 0 {
			return true
		}
	}
	return !strings.Contains(key, "}")
}

// startAdaptive installs an estimator of settings a for this instance's
// share, starting from initial.
func (s *Shedder) startAdaptive(a shedder.AdaptiveCapacity, meter, mem core.CPUMeter, initial int64) {
	initial = min(max(initial, a.Min), a.Max)
	var e *core.Estimator
	e = core.NewEstimator(core.Adaptive(a), meter, mem, initial, s.clock, func(c int64) {
		if s.est.Load() == e { // not an estimator a Reconfigure replaced
			s.setOwn(c)
		}
	})
	s.est.Store(e)
	s.setOwn(initial)
}

// setOwn records this instance's adaptive capacity.
func (s *Shedder) setOwn(c int64) {
	s.capMu.Lock()
	s.own = c
	s.capMu.Unlock()
	s.relayout()
}

// relayout recomputes the fleet capacity and the gate.
func (s *Shedder) relayout() {
	s.capMu.Lock()
	defer s.capMu.Unlock()
	capacity := s.fixed
	if s.est.Load() != nil {
		capacity = s.own
		if !s.stale.Load() {
			capacity += s.othersCap + s.othersNoCap*s.own
		}
	}
	s.v.Capacity.Store(capacity)
	s.gate.Layout(core.FractionOf(1-s.reserve, capacity), capacity, s.band)
}

// Capacity returns the fleet capacity in force: the one the Shedder was
// built or reconfigured with or, with an adaptive capacity, the sum of the
// live instances' learnt capacities (this instance's alone while the
// fleet counts are stale).
func (s *Shedder) Capacity() int64 { return s.v.Capacity.Load() }

// Stats returns a snapshot of the fleet capacity and, when it is adaptive,
// of what this instance learnt its own share from (Estimate).
func (s *Shedder) Stats() shedder.Stats {
	st := shedder.Stats{CPU: -1, Memory: -1}
	if e := s.est.Load(); e != nil {
		st = shedder.Stats(e.Snapshot())
	}
	st.Capacity = s.Capacity()
	return st
}

// doneOf returns the Done of a request of priority p admitted with
// inflight requests in flight on this instance, itself included.
func (s *Shedder) doneOf(ctx context.Context, e *core.Estimator, p floodgate.Priority, inflight int64) floodgate.Done {
	if e == nil {
		return s.dones[p]
	}
	t := s.tickets.Get().(*core.Ticket)
	t.Start(e, p, inflight, reqctx.Wait(ctx), time.Time{})
	return t.Done
}

func (s *Shedder) release(t *core.Ticket) {
	s.local[t.P].Add(-1)
	s.localTotal.Add(-1)
	s.tickets.Put(t)
}

// Admit implements floodgate.Admitter. It never calls Redis. A request
// whose Priority is none of the named ones is decided at the default
// priority and returns shedder.ErrInvalidPriority; while the counts are
// stale it returns ErrStale.
func (s *Shedder) Admit(ctx context.Context, r *floodgate.Request) (floodgate.Decision, floodgate.Done, error) {
	p, err := s.v.Priority(r)
	others := s.othersTotal.Load()
	stale := s.stale.Load()
	if !stale && others > 0 {
		// The other instances' counts are a TTL old though no Sync has
		// failed yet (one waits on a slow Redis, or none runs): decide on
		// local counts, as a failed Sync would have made it.
		if last := s.lastOK.Load(); last != 0 && s.clock.Now().UnixNano()-last >= int64(s.m.TTL) {
			stale, others = true, 0
		}
	}
	if stale && err == nil {
		err = ErrStale
	}
	e := s.est.Load()
	if p == floodgate.PriorityCritical {
		s.local[p].Add(1)
		n := s.localTotal.Add(1)
		return s.v.Allow(p, others+n), s.doneOf(ctx, e, p, n), err
	}
	fs := s.fair.Share()
	for {
		n := s.localTotal.Load()
		total := others + n
		shed, over := s.gate.Shed(total), false
		if fs != nil {
			shed, over = s.fairly(fs, r, total, shed)
		}
		if shed {
			if e != nil && !over {
				e.Shed.Add(1)
			}
			if over {
				return s.v.ShedUnfair(p, total), nil, err
			}
			return s.v.Shed(p, total), nil, err
		}
		if s.localTotal.CompareAndSwap(n, n+1) {
			s.local[p].Add(1)
			return s.v.Allow(p, total+1), fs.Hold(r, s.doneOf(ctx, e, p, n+1)), err
		}
	}
}

// fairly is the decision of fairness on a request the gate sheds (or
// not) with total in flight in the fleet: while it sheds, a caller under
// its share of this instance's part of the room is let in up to the
// hysteresis band above the threshold; while it does not, a caller over
// its share is held to it. over reports that the caller's share decided.
func (s *Shedder) fairly(fs *fair.Share, r *floodgate.Request, total int64, shedding bool) (shed, over bool) {
	start, _ := s.gate.Bounds()
	live := max(s.live.Load(), 1)
	room := max(1, (start+live-1)/live)
	if !shedding {
		ok := fs.Admits(r, room, false)
		return !ok, !ok
	}
	if total >= start+core.FractionOf(s.band, s.v.Capacity.Load()) {
		return true, false
	}
	ok := fs.Admits(r, room, true)
	return !ok, !ok
}

// Sync beats for this instance on the Members' set, which its Count and
// Stale then reflect as after one of its own beats; publishes this
// instance's counts; drops the counts of instances no longer live; and
// takes the other live instances' counts for the next decisions. On
// error the previous counts stay in force until they are a TTL old; then
// the Shedder fails open (see ErrStale). Sync calls are serialised; each
// is bounded by the Members' timeout (fleet.WithTimeout).
func (s *Shedder) Sync(ctx context.Context) error {
	s.syncMu.Lock()
	defer s.syncMu.Unlock()
	ctx, cancel := context.WithTimeout(ctx, s.m.Timeout)
	defer cancel()

	args := []any{redisnow.Arg(s.m.ScriptClock), s.m.TTL.Milliseconds(), s.m.ID, 0, 0, 0, 0, ""}
	for p := floodgate.PriorityTest; p <= floodgate.PriorityCritical; p++ {
		args[2+int(p)] = s.local[p].Load()
	}
	if s.est.Load() != nil {
		s.capMu.Lock()
		args[7] = s.own
		s.capMu.Unlock()
	}
	start := s.m.Clock.Now().UnixNano()
	sums, err := syncScript.Run(ctx, s.m.Client, s.keys, args...).Int64Slice()
	if err == nil && (len(sums) != 8 || sums[6] < 1) {
		err = fmt.Errorf("sync script returned %v, want 6 sums and {live >= 1, rejoined}", sums)
	}
	now := s.clock.Now().UnixNano()
	if err != nil {
		failover.Follow(s.m.Client, err)
		if last := s.lastOK.Load(); last == 0 || now-last >= int64(s.m.TTL) {
			s.forgetOthers()
			s.relayout()
		}
		return fmt.Errorf("fleetshed: sync of instance %q: %w", s.m.ID, err)
	}
	s.m.Observe(sums[6], sums[7] == 1, start)
	s.live.Store(sums[6])
	var total int64
	for i, v := range sums[:4] {
		s.others[i+1].Store(v)
		total += v
	}
	s.othersTotal.Store(total)
	s.capMu.Lock()
	s.othersCap, s.othersNoCap = sums[4], sums[5]
	s.capMu.Unlock()
	s.lastOK.Store(now)
	s.stale.Store(false)
	s.relayout()
	return nil
}

func (s *Shedder) forgetOthers() {
	for p := range s.others {
		s.others[p].Store(0)
	}
	s.othersTotal.Store(0)
	s.live.Store(1)
	s.stale.Store(true)
}

// Leave deletes this instance's counts (and published capacity) from
// Redis, so its share is freed at once rather than a TTL after its last
// beat. Requests still in flight are no longer counted fleet-wide until
// the next Sync. The member set is the Members' own: Leave does not touch
// it (fleet.Members.Leave does).
func (s *Shedder) Leave(ctx context.Context) error {
	s.syncMu.Lock()
	defer s.syncMu.Unlock()
	ctx, cancel := context.WithTimeout(ctx, s.m.Timeout)
	defer cancel()
	for _, key := range s.keys[1:] {
		if err := s.m.Client.HDel(ctx, key, s.m.ID).Err(); err != nil {
			return fmt.Errorf("fleetshed: leave of instance %q: %w", s.m.ID, err)
		}
	}
	return nil
}

// Run calls Sync at once and then every heartbeat interval of the Members
// (on real time) until ctx is done; then it calls Leave and returns ctx's
// error. Each failed Sync or Leave is passed to onError when it is not
// nil. Each Sync is also a heartbeat of the Members, so a service may run
// this alone, or beside the Members' own Run.
func (s *Shedder) Run(ctx context.Context, onError func(error)) error {
	report := func(err error) {
		if err != nil && onError != nil {
			onError(err)
		}
	}
	report(s.Sync(ctx))
	t := time.NewTicker(s.m.Interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			report(s.Leave(context.WithoutCancel(ctx)))
			return ctx.Err()
		case <-t.C:
			report(s.Sync(ctx))
		}
	}
}
