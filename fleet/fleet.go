package fleet

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/internal/failover"
	"github.com/floodgate-go/floodgate/internal/liveness"
	"github.com/floodgate-go/floodgate/internal/redisnow"
)

//go:embed beat.lua
var beatLua string

var beatScript = redisnow.Script(liveness.BeatLua + beatLua)

func init() {
	liveness.Lookup = func(v any) (liveness.Member, bool) {
		m, ok := v.(*Members)
		if !ok || m == nil || m.static {
			return liveness.Member{}, false
		}
		return liveness.Member{
			Client: m.client, Key: m.key, ID: m.id,
			Interval: m.interval, TTL: m.ttl, Timeout: m.timeout,
			Clock: m.clock, ScriptClock: m.scriptClock,
			Observe: m.observe,
		}, true
	}
}

// Members counts the live instances of a service that share one Redis. Its
// methods are safe for concurrent use; Count and Stale do no I/O.
type Members struct {
	count    atomic.Int64 // last known live count, >= 1
	lastOK   atomic.Int64 // clock Unix nanos at the start of the last successful beat; 0 = never
	failures atomic.Int64
	running  atomic.Bool

	client      redis.UniversalClient
	key         string
	keys        []string
	id          string
	interval    time.Duration
	ttl         time.Duration
	ttlMs       int64
	timeout     time.Duration
	clock       floodgate.Clock // Stale and the log throttle
	scriptClock floodgate.Clock // nil: the script reads Redis TIME
	static      bool
	logger      *slog.Logger

	mu sync.Mutex // serialises Beat and Leave
}

// New returns a Members that keeps this instance's heartbeat in client
// under the key of WithKey (default "fg:fleet:{members}"). Call Run in a goroutine
// to beat every interval, or call Beat yourself. client may be nil only
// with WithStatic. New returns an error naming every bad option.
func New(client redis.UniversalClient, opts ...Option) (*Members, error) {
	c := newConfig(opts)
	if client == nil && c.static == 0 {
		c.errs = append(c.errs, errors.New("fleet: redis client is nil (only WithStatic works without one)"))
	}
	if len(c.errs) > 0 {
		return nil, errors.Join(c.errs...)
	}
	m := &Members{
		client:      client,
		key:         c.key,
		keys:        []string{c.key},
		id:          c.id,
		interval:    c.interval,
		ttl:         c.ttl,
		ttlMs:       c.ttl.Milliseconds(),
		timeout:     c.timeout,
		clock:       c.clock,
		scriptClock: c.clock,
		static:      c.static > 0,
		logger:      c.logger,
	}
	if m.clock == nil {
		m.clock = floodgate.SystemClock()
	}
	if m.static {
		m.count.Store(int64(c.static))
	} else {
		m.count.Store(1)
	}
	return m, nil
}

// Count returns the number of live instances as of the last successful
// beat, this one included, so always at least 1. It does no I/O: one
// atomic load, cheap enough for every request (pass m.Count where a
// func() int is wanted).
//
// Before the first successful beat it returns 1 (this instance alone);
// when beats fail it keeps the last known count, however old (see Stale);
// with WithStatic it always returns the static count.
func (m *Members) Count() int { return int(m.count.Load()) }

// Stale reports whether no beat has succeeded within the TTL, measured on
// the Clock: true before the first successful beat and once Redis has not
// answered for a TTL. Count is then the last known count, which may be
// wrong either way (instances may have died or started meanwhile); a
// consumer that prefers a configured count while stale can check it.
// Always false with WithStatic.
func (m *Members) Stale() bool {
	if m.static {
		return false
	}
	last := m.lastOK.Load()
	return last == 0 || m.clock.Now().UnixNano()-last >= int64(m.ttl)
}

// Errors returns how many Beat and Leave calls have failed since New, not
// counting those cut short by their caller's context.
func (m *Members) Errors() int64 { return m.failures.Load() }

// Beat sends one heartbeat: in one atomic script call it records this
// instance as live until now + TTL, removes the instances whose expiry has
// passed, and reads how many are live, which Count returns from then on.
// Now is Redis TIME, or the Clock of WithClock. The call is bounded by the
// timeout (WithTimeout). On error Count keeps its last value.
//
// A beat that finds this instance's own entry missing (its first beat,
// after Leave, after its own entry expired, or after Redis lost the set in
// a restart or failover) does not lower Count: it takes the larger of the
// last count and the new one, because the other instances re-register only
// at their next beats, within one interval. The next beat counts exactly.
// This keeps a Redis restart from making every instance briefly believe it
// is alone and take the whole fleet's limit.
//
// With WithStatic, Beat does nothing and returns nil.
func (m *Members) Beat(ctx context.Context) error {
	if m.static {
		return nil
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	cctx, cancel := context.WithTimeout(ctx, m.timeout)
	defer cancel()
	start := m.clock.Now().UnixNano()
	res, err := beatScript.Run(cctx, m.client, m.keys, redisnow.Arg(m.scriptClock), m.ttlMs, m.id).Int64Slice()
	if err == nil && (len(res) != 2 || res[0] < 1) {
		err = fmt.Errorf("script returned %v, want {count >= 1, rejoined}", res)
	}
	if err != nil {
		if ctx.Err() == nil {
			m.failures.Add(1)
		}
		failover.Follow(m.client, err)
		return fmt.Errorf("fleet: beat of instance %q on key %q: %w", m.id, m.key, err)
	}
	m.observe(res[0], res[1] == 1, start)
	return nil
}

// observe records the answer of a beat that started at start: live
// instances, and whether this one rejoined (then the count never falls).
// Beat calls it, and so does a fleet-wide stage whose script beats for
// this Members (see package internal/liveness).
func (m *Members) observe(live int64, rejoined bool, start int64) {
	if rejoined {
		live = max(live, m.count.Load())
	}
	m.count.Store(live)
	m.lastOK.Store(start)
}

// Leave removes this instance from the member set, so the others count one
// fewer at their next beat instead of a TTL later. It leaves Count and
// Stale of this Members as they were; a later Beat joins again. The call is
// bounded by the timeout (WithTimeout). With WithStatic, Leave does nothing
// and returns nil.
func (m *Members) Leave(ctx context.Context) error {
	if m.static {
		return nil
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	cctx, cancel := context.WithTimeout(ctx, m.timeout)
	defer cancel()
	if err := m.client.ZRem(cctx, m.key, m.id).Err(); err != nil {
		if ctx.Err() == nil {
			m.failures.Add(1)
		}
		return fmt.Errorf("fleet: leave of instance %q on key %q: %w", m.id, m.key, err)
	}
	return nil
}

// Run beats at once and then every interval (on real time) until ctx is
// done; then it calls Leave, with ctx's values but not its cancellation,
// and returns ctx's error. A failed beat or leave is never fatal: it is
// counted (Errors) and logged at Warn at most once per 10s (on the Clock),
// with the number of failures since the last line; the first beat that
// succeeds after failures is logged at Info. Only one Run may run at a
// time: a second one returns an error at once. With WithStatic, Run sends
// nothing and only waits for ctx.
func (m *Members) Run(ctx context.Context) error {
	if !m.running.CompareAndSwap(false, true) {
		return errors.New("fleet: Run is already running for this Members")
	}
	defer m.running.Store(false)
	if m.static {
		<-ctx.Done()
		return ctx.Err()
	}
	var l runLog
	l.report(ctx, m, "beat", m.Beat(ctx))
	t := time.NewTicker(m.interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			l.report(context.Background(), m, "leave", m.Leave(context.WithoutCancel(ctx)))
			return ctx.Err()
		case <-t.C:
			l.report(ctx, m, "beat", m.Beat(ctx))
		}
	}
}

// runLog throttles Run's log lines; only Run's goroutine touches it.
type runLog struct {
	failing    int   // failures since the last success
	unlogged   int   // failures since the last line
	lastLogged int64 // clock Unix nanos of the last Warn; 0 = none
}

func (l *runLog) report(ctx context.Context, m *Members, op string, err error) {
	if err == nil {
		if l.failing > 0 && op == "beat" {
			m.logger.Info("fleet: heartbeats recovered", "key", m.key, "instance", m.id,
				"failures", l.failing, "count", m.Count())
			*l = runLog{}
		}
		return
	}
	if ctx.Err() != nil {
		return // cut short by Run's own end, not a Redis failure
	}
	l.failing++
	l.unlogged++
	now := m.clock.Now().UnixNano()
	if l.lastLogged != 0 && now-l.lastLogged < int64(logEvery) {
		return
	}
	msg := "fleet: heartbeat failed; Count keeps the last known count"
	if op == "leave" {
		msg = "fleet: leave failed; the others drop this instance a TTL after its last beat"
	}
	m.logger.Warn(msg, "key", m.key, "instance", m.id, "error", err,
		"failures", l.unlogged, "count", m.Count(), "stale", m.Stale())
	l.lastLogged = now
	l.unlogged = 0
}
