package fallback_test

import (
	"context"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/sony/gobreaker/v2"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/fallback"
	"github.com/floodgate-go/floodgate/quota"
	"github.com/floodgate-go/floodgate/testing/redistest"
	"github.com/floodgate-go/floodgate/tiers/redisstore"
)

// Fault tests against real redis-server processes. Each starts its own
// server on a free loopback port (testing/redistest) and drives a guarded
// Redis store with 8 goroutines, each bounded in count and time.
//
// The budget is 50ms rather than the 5ms default: these tests run under the
// race detector on a shared two-core machine, where a healthy Redis round
// trip can take tens of milliseconds, and a healthy call that times out
// reopens the breaker (correctly, but not what the test is about).

const (
	liveWorkers   = 8
	liveMaxIter   = 20_000 // per worker
	liveMaxRun    = 20 * time.Second
	liveThinkTime = 300 * time.Microsecond
	// latencySlack is what the issue allows above the timeout.
	latencySlack = 2 * time.Millisecond
)

// Bucket kinds the load cycles through.
const (
	kindLocal = iota
	kindClosed
	kindOpen
	numKinds
)

// liveBuckets: a tight FailLocal bucket (200/s, burst 20), and two generous
// ones the store always allows, FailClosed (login) and FailOpen (search).
var liveBuckets = [numKinds]quota.Bucket{
	kindLocal: {Key: "live:{u1}:api", Limit: quota.Limit{Algorithm: quota.TokenBucket, Rate: 200, Period: time.Second, Burst: 20}, Cost: 1, OnStoreError: quota.FailLocal},
	kindClosed: {Key: "live:{u1}:login", Limit: quota.Limit{Algorithm: quota.TokenBucket, Rate: 1_000_000, Period: time.Second, Burst: 1_000_000}, Cost: 1,
		OnStoreError: quota.FailClosed},
	kindOpen: {Key: "live:{u1}:search", Limit: quota.Limit{Algorithm: quota.TokenBucket, Rate: 1_000_000, Period: time.Second, Burst: 1_000_000}, Cost: 1,
		OnStoreError: quota.FailOpen},
}

func init() {
	// go-redis logs every failed dial; the fault tests make hundreds.
	redis.SetLogger(quietLogger{})
}

type quietLogger struct{}

func (quietLogger) Printf(context.Context, string, ...any) {}

type sample struct {
	start   time.Time
	lat     time.Duration
	kind    int
	allowed bool
	res     quota.Result
	err     error
}

// load runs liveWorkers goroutines taking buckets through s until stop is
// called, liveMaxIter takes each, or liveMaxRun passes.
type load struct {
	stopped atomic.Bool
	wg      sync.WaitGroup
	mu      sync.Mutex
	samples []sample
	stalls  []stall
}

// stall is an interval in which a goroutine that only sleeps 200µs could
// not run for more than stallMin: the process was not scheduled (the test
// machine is shared) or the runtime stopped the world. A decision that
// overlaps one measures the machine, not the store.
type stall struct{ from, to time.Time }

const stallMin = time.Millisecond

func (l *load) watchStalls(deadline time.Time) {
	defer l.wg.Done()
	for !l.stopped.Load() && time.Now().Before(deadline) {
		t0 := time.Now()
		time.Sleep(200 * time.Microsecond)
		if gap := time.Since(t0); gap > stallMin {
			l.mu.Lock()
			l.stalls = append(l.stalls, stall{t0, t0.Add(gap)})
			l.mu.Unlock()
		}
	}
}

// stalled reports whether [from, to] overlaps a measured stall.
func (l *load) stalled(from, to time.Time) bool {
	for _, st := range l.stalls {
		if st.from.Before(to) && from.Before(st.to) {
			return true
		}
	}
	return false
}

func startLoad(s quota.Store) *load {
	l := &load{}
	deadline := time.Now().Add(liveMaxRun)
	l.wg.Add(1)
	go l.watchStalls(deadline)
	for w := 0; w < liveWorkers; w++ {
		l.wg.Add(1)
		go func(w int) {
			defer l.wg.Done()
			mine := make([]sample, 0, 4096)
			res := make([]quota.Result, 1)
			for i := 0; i < liveMaxIter && !l.stopped.Load() && time.Now().Before(deadline); i++ {
				kind := (w + i) % numKinds
				b := liveBuckets[kind : kind+1]
				start := time.Now()
				ok, err := s.Take(context.Background(), b, res)
				mine = append(mine, sample{start: start, lat: time.Since(start), kind: kind, allowed: ok, res: res[0], err: err})
				time.Sleep(liveThinkTime)
			}
			l.mu.Lock()
			l.samples = append(l.samples, mine...)
			l.mu.Unlock()
		}(w)
	}
	return l
}

func (l *load) stop() []sample {
	l.stopped.Store(true)
	l.wg.Wait()
	slices.SortFunc(l.samples, func(a, b sample) int { return a.start.Compare(b.start) })
	return l.samples
}

// liveStore builds the guarded Redis store. The go-redis client honours
// context deadlines (ContextTimeoutEnabled), which the fallback's timeout
// relies on, and retries a dead pooled connection without backoff.
func liveStore(t *testing.T, srv *redistest.Server, opts ...fallback.Option) (*fallback.Store, *stateLog) {
	t.Helper()
	client := redis.NewClient(&redis.Options{
		Addr:                  srv.Addr(),
		ContextTimeoutEnabled: true,
		DialTimeout:           time.Second,
		ReadTimeout:           time.Second,
		WriteTimeout:          time.Second,
		MaxRetries:            2,
		MinRetryBackoff:       -1,
		MaxRetryBackoff:       -1,
		// One dial attempt per command: the breaker is the retry policy.
		// go-redis stops dialing once failed dials reach PoolSize (until
		// a background dial succeeds, polled every second), which would
		// delay recovery; a pool larger than the dials an outage makes
		// keeps it dialing.
		DialerRetries: 1,
		PoolSize:      256,
	})
	t.Cleanup(func() { _ = client.Close() })
	primary, err := redisstore.New(client)
	if err != nil {
		t.Fatalf("redisstore.New: %v", err)
	}
	t.Cleanup(func() { _ = primary.Close() })
	sl := &stateLog{}
	all := append([]fallback.Option{
		fallback.WithLogger(slog.New(slog.NewTextHandler(testWriter{t}, nil))),
		fallback.WithOnStateChange(sl.record),
	}, opts...)
	s, err := fallback.New(primary, all...)
	if err != nil {
		t.Fatalf("fallback.New: %v", err)
	}
	return s, sl
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(string(p))
	return len(p), nil
}

type stateChange struct {
	at       time.Time
	from, to gobreaker.State
}

type stateLog struct {
	mu sync.Mutex
	ch []stateChange
}

func (sl *stateLog) record(_ string, from, to gobreaker.State) {
	sl.mu.Lock()
	sl.ch = append(sl.ch, stateChange{time.Now(), from, to})
	sl.mu.Unlock()
}

func (sl *stateLog) changes() []stateChange {
	sl.mu.Lock()
	defer sl.mu.Unlock()
	return append([]stateChange(nil), sl.ch...)
}

func (sl *stateLog) first(to gobreaker.State, after time.Time) (time.Time, bool) {
	for _, c := range sl.changes() {
		if c.to == to && !c.at.Before(after) {
			return c.at, true
		}
	}
	return time.Time{}, false
}

// waitFor polls cond every millisecond for at most d.
func waitFor(d time.Duration, cond func() bool) bool {
	end := time.Now().Add(d)
	for time.Now().Before(end) {
		if cond() {
			return true
		}
		time.Sleep(time.Millisecond)
	}
	return cond()
}

// checkOutage asserts what every decision in [from, to) must show while the
// store is unavailable, and returns the counts by source.
func checkOutage(t *testing.T, samples []sample, from, to time.Time, retryAfter time.Duration) map[floodgate.Source]int {
	t.Helper()
	counts := map[floodgate.Source]int{}
	for _, s := range samples {
		if s.start.Before(from) || !s.start.Before(to) {
			continue
		}
		counts[s.res.Source]++
		switch s.kind {
		case kindClosed:
			if s.allowed || s.res.Source != floodgate.SourceFailClosed || s.res.RetryAfter != retryAfter {
				t.Errorf("login during the outage: allowed=%v %+v, want fail_closed deny with %s", s.allowed, s.res, retryAfter)
			}
		case kindOpen:
			if !s.allowed || s.res.Source != floodgate.SourceFailOpen {
				t.Errorf("search during the outage: allowed=%v %+v, want fail_open allow", s.allowed, s.res)
			}
		case kindLocal:
			if s.res.Source != floodgate.SourceLocalFallback {
				t.Errorf("api during the outage: %+v, want local_fallback", s.res)
			}
		}
	}
	return counts
}

// checkLatency asserts every decision started in [from, to) took at most
// budget + latencySlack, unless it overlapped a measured stall of the
// process; those are logged, and must stay a small minority.
func checkLatency(t *testing.T, l *load, samples []sample, from, to time.Time, budget time.Duration) {
	t.Helper()
	var worst time.Duration
	n, excused := 0, 0
	for _, x := range samples {
		if x.start.Before(from) || !x.start.Before(to) {
			continue
		}
		n++
		if x.lat <= budget+latencySlack {
			worst = max(worst, x.lat)
			continue
		}
		if l.stalled(x.start, x.start.Add(x.lat)) {
			excused++
			continue
		}
		t.Errorf("decision +%s took %s, want <= %s: %+v", x.start.Sub(from), x.lat, budget+latencySlack, x.res)
	}
	t.Logf("%d decisions, slowest within bound %s; %d over the bound overlapped a process stall (%d stalls > %s measured)",
		n, worst, excused, len(l.stalls), stallMin)
	if excused*10 > n {
		t.Errorf("%d of %d decisions overlapped process stalls: the machine is too loaded for this test to mean anything", excused, n)
	}
}

// checkLocalBound asserts the local bucket admitted no more than its local
// share (burst 20/2 = 10, rate 200/2 = 100/s) over the span of its local
// decisions, and that it did deny (the limit really bound).
func checkLocalBound(t *testing.T, samples []sample) {
	t.Helper()
	var first, last time.Time
	allowed, denied := 0, 0
	for _, s := range samples {
		if s.kind != kindLocal || s.res.Source != floodgate.SourceLocalFallback {
			continue
		}
		if first.IsZero() {
			first = s.start
		}
		last = s.start.Add(s.lat)
		if s.allowed {
			allowed++
		} else {
			denied++
		}
	}
	if allowed+denied == 0 {
		t.Fatal("no local decisions")
	}
	bound := 10 + int(100*last.Sub(first).Seconds()) + 1
	if allowed > bound {
		t.Errorf("local bucket admitted %d over %s, more than its share %d (burst 10 + 100/s)", allowed, last.Sub(first), bound)
	}
	if denied == 0 {
		t.Errorf("local bucket never denied in %d decisions: the local limit did not bind", allowed)
	}
	t.Logf("local bucket: %d allowed, %d denied over %s (bound %d)", allowed, denied, last.Sub(first), bound)
}

func TestLiveKill(t *testing.T) {
	if testing.Short() {
		t.Skip("starts redis-server")
	}
	const (
		budget     = 50 * time.Millisecond
		openFor    = 250 * time.Millisecond
		failures   = 3
		retryAfter = quota.StoreErrorRetryAfter
	)
	srv := redistest.Start(t)
	s, sl := liveStore(t, srv, fallback.WithTimeout(budget), fallback.WithFailures(failures),
		fallback.WithOpenInterval(openFor), fallback.WithInstances(func() int { return 2 }))

	l := startLoad(s)
	time.Sleep(200 * time.Millisecond)
	srv.Kill()
	killed := time.Now()
	time.Sleep(700 * time.Millisecond) // several open intervals with failed probes
	before := s.Stats()
	// The outage ends when Restart starts (the new process may answer
	// before Restart returns); recovery is timed from its return, when the
	// server answers PING.
	outageEnd := time.Now()
	srv.Restart()
	restarted := time.Now()
	closedOK := waitFor(openFor+time.Second, func() bool { return s.State() == gobreaker.StateClosed })
	time.Sleep(100 * time.Millisecond)
	samples := l.stop()
	st := s.Stats()
	t.Logf("stats at restart %+v", before)
	t.Logf("stats at end %+v", st)

	// Zero errors reach callers.
	for _, x := range samples {
		if x.err != nil {
			t.Fatalf("Take returned an error to the caller: %v", x.err)
		}
	}
	// Decisions before the kill came from Redis.
	healthy := 0
	for _, x := range samples {
		if x.start.Before(killed.Add(-50*time.Millisecond)) && x.res.Source == floodgate.SourceStore {
			healthy++
		}
	}
	if healthy == 0 {
		t.Fatal("no decision came from Redis before the kill")
	}
	// Every decision after the kill within the budget + 2ms, except those
	// overlapping a measured scheduling stall of the whole process.
	checkLatency(t, l, samples, killed, time.Now().Add(time.Hour), budget)
	// The breaker opened after the configured failures, shortly after the kill.
	opened, ok := sl.first(gobreaker.StateOpen, killed)
	if !ok {
		t.Fatalf("breaker never opened; changes %v", sl.changes())
	}
	if before.Failures < failures || before.Rejected == 0 {
		t.Errorf("at restart: %d failures, %d rejected; want >= %d failures and calls kept off Redis", before.Failures, before.Rejected, failures)
	}
	t.Logf("breaker opened %s after the kill", opened.Sub(killed))
	// During the outage (opening to restart) every rule acts by its mode,
	// and the counts match what callers saw.
	counts := checkOutage(t, samples, opened, outageEnd, retryAfter)
	if counts[floodgate.SourceFailClosed] == 0 || counts[floodgate.SourceFailOpen] == 0 || counts[floodgate.SourceLocalFallback] == 0 {
		t.Errorf("outage decisions by source %v, want every mode exercised", counts)
	}
	checkLocalBound(t, samples)
	var seen [numKinds][2]uint64
	for _, x := range samples {
		if x.res.Source.Degraded() {
			a := 0
			if x.allowed {
				a = 1
			}
			seen[x.kind][a]++
		}
	}
	want := [3]fallback.ModeCount{
		quota.FailLocal:  {Allowed: seen[kindLocal][1], Denied: seen[kindLocal][0]},
		quota.FailOpen:   {Allowed: seen[kindOpen][1], Denied: seen[kindOpen][0]},
		quota.FailClosed: {Allowed: seen[kindClosed][1], Denied: seen[kindClosed][0]},
	}
	if st.Fallback != want {
		t.Errorf("Stats counts %+v, callers saw %+v", st.Fallback, want)
	}
	// After the restart the breaker closes within the open interval plus
	// one probe, and decisions come from Redis again.
	if !closedOK {
		t.Fatalf("breaker still %s %s after the restart", s.State(), openFor+time.Second)
	}
	closedAt, ok := sl.first(gobreaker.StateClosed, restarted)
	if !ok {
		t.Fatalf("no close after the restart; changes %v", sl.changes())
	}
	// Worst case: a probe fails just as Redis returns (up to one budget),
	// the breaker stays open one interval, then one probe succeeds.
	if d := closedAt.Sub(restarted); d > openFor+2*budget+latencySlack {
		t.Errorf("breaker closed %s after the restart, want within the open interval %s plus a failing and a succeeding probe (%s each)", d, openFor, budget)
	}
	t.Logf("breaker closed %s after the restart", closedAt.Sub(restarted))
	back := 0
	for _, x := range samples {
		if x.start.After(closedAt) && x.res.Source == floodgate.SourceStore {
			back++
		}
	}
	if back == 0 {
		t.Error("no decision came from Redis after the breaker closed")
	}
	// A later reopening is legitimate only if a call really failed (on a
	// loaded machine a stall can push a call past its budget).
	if st.Opened > before.Opened+1 && st.Failures == before.Failures {
		t.Errorf("breaker reopened after the restart without a failure: %+v", st)
	}
}

func TestLivePause(t *testing.T) {
	if testing.Short() {
		t.Skip("starts redis-server")
	}
	const (
		budget     = 50 * time.Millisecond
		grace      = 100 * time.Millisecond
		openFor    = 200 * time.Millisecond
		failures   = 3
		retryAfter = quota.StoreErrorRetryAfter
	)
	srv := redistest.Start(t)
	// A pause longer than the slow grace is an outage: once Redis has not
	// answered anything for the grace, timeouts count and open the breaker.
	s, sl := liveStore(t, srv, fallback.WithTimeout(budget), fallback.WithClosedTimeout(budget), fallback.WithSlowGrace(grace),
		fallback.WithFailures(failures), fallback.WithOpenInterval(openFor), fallback.WithInstances(func() int { return 2 }))

	l := startLoad(s)
	time.Sleep(200 * time.Millisecond)
	srv.Pause()
	// SIGSTOP is asynchronous: give it a moment before judging decisions.
	paused := time.Now().Add(time.Millisecond)
	time.Sleep(600 * time.Millisecond)
	pauseEnd := time.Now() // decisions after SIGCONT may come from Redis
	srv.Resume()
	resumed := time.Now()
	closedOK := waitFor(openFor+time.Second, func() bool { return s.State() == gobreaker.StateClosed })
	time.Sleep(100 * time.Millisecond)
	samples := l.stop()
	st := s.Stats()
	t.Logf("stats %+v", st)

	for _, x := range samples {
		if x.err != nil {
			t.Fatalf("Take returned an error to the caller: %v", x.err)
		}
	}
	// Calls to the paused Redis time out at the budget and fall back.
	var lats []time.Duration
	timedOut := 0
	for _, x := range samples {
		if x.start.Before(paused) || !x.start.Before(pauseEnd) {
			continue
		}
		lats = append(lats, x.lat)
		// A call started within a budget of the resume may be answered.
		if x.res.Source == floodgate.SourceStore && x.start.Before(pauseEnd.Add(-budget)) {
			t.Errorf("decision from the store %s into the pause: %+v", x.start.Sub(paused), x.res)
		}
		if x.lat >= budget {
			timedOut++
			if x.lat > budget+latencySlack {
				t.Logf("slow decision: %s", x.lat)
			}
		}
	}
	if st.Timeouts < failures || timedOut == 0 {
		t.Errorf("%d timeouts counted, %d decisions waited the budget; want >= %d and some", st.Timeouts, timedOut, failures)
	}
	checkLatency(t, l, samples, paused, pauseEnd, budget)
	slices.Sort(lats)
	p99 := lats[len(lats)*99/100]
	if p99 >= budget+latencySlack {
		t.Errorf("p99 decision latency during the pause %s, want < %s", p99, budget+latencySlack)
	}
	t.Logf("pause: %d decisions, %d waited the budget, p99 %s, max %s", len(lats), timedOut, p99, lats[len(lats)-1])
	opened, ok := sl.first(gobreaker.StateOpen, paused)
	if !ok {
		t.Fatalf("breaker never opened; changes %v", sl.changes())
	}
	// Calls time out as slow for the grace, then three timed-out calls
	// open it: one budget when they overlap, a few on a loaded machine;
	// never the whole pause. The grace runs from the last answer, which
	// a loaded machine may have delivered a few milliseconds before the
	// pause (a run opened it 99.5ms into the pause, its last answer 1.5ms
	// before it): 5ms of slack below.
	if d := opened.Sub(paused); d < grace-5*time.Millisecond || d > grace+10*budget {
		t.Errorf("breaker opened %s into the pause, want after the grace %s and within a few budgets (%s) of it", d, grace, budget)
	}
	if st.Slow == 0 {
		t.Errorf("no call was counted slow during the grace: %+v", st)
	}
	t.Logf("breaker opened %s into the pause", opened.Sub(paused))
	// A probe started in the last budget of the pause may be answered by
	// the resumed Redis.
	counts := checkOutage(t, samples, opened, pauseEnd.Add(-budget), retryAfter)
	if counts[floodgate.SourceFailClosed] == 0 || counts[floodgate.SourceFailOpen] == 0 || counts[floodgate.SourceLocalFallback] == 0 {
		t.Errorf("pause decisions by source %v, want every mode exercised", counts)
	}
	checkLocalBound(t, samples)
	if !closedOK {
		t.Fatalf("breaker still %s %s after resuming", s.State(), openFor+time.Second)
	}
	closedAt, _ := sl.first(gobreaker.StateClosed, resumed)
	if d := closedAt.Sub(resumed); d > openFor+2*budget+latencySlack {
		t.Errorf("breaker closed %s after resuming, want within the open interval %s plus a failing and a succeeding probe (%s each)", d, openFor, budget)
	}
	t.Logf("breaker closed %s after resuming", closedAt.Sub(resumed))
}

// TestLiveNoScriptDoesNotTrip empties the script cache (SCRIPT FLUSH, then a
// restart) under a breaker that opens on the first failure: the Redis store
// answers NOSCRIPT by re-sending the script, so no failure is counted.
func TestLiveNoScriptDoesNotTrip(t *testing.T) {
	if testing.Short() {
		t.Skip("starts redis-server")
	}
	srv := redistest.Start(t)
	s, sl := liveStore(t, srv, fallback.WithTimeout(200*time.Millisecond), fallback.WithFailures(1), fallback.WithOpenInterval(time.Hour))
	b := []quota.Bucket{liveBuckets[kindClosed]}
	takeStore := func(phase string) {
		t.Helper()
		for i := 0; i < 3; i++ {
			res := make([]quota.Result, 1)
			ok, err := s.Take(context.Background(), b, res)
			if err != nil || !ok || res[0].Source != floodgate.SourceStore {
				t.Fatalf("%s take %d: allowed=%v err=%v %+v, want allowed by the store", phase, i, ok, err, res[0])
			}
		}
	}
	takeStore("before")
	srv.ScriptFlush()
	takeStore("after SCRIPT FLUSH")
	srv.Restart()
	takeStore("after restart")
	if st := s.Stats(); st.Failures != 0 || st.State != gobreaker.StateClosed || len(sl.changes()) != 0 {
		t.Fatalf("stats %+v, changes %v: NOSCRIPT counted against the store", st, sl.changes())
	}
}

// TestLiveShortPausesAreNotAnOutage pauses Redis for 30ms every 500ms
// under load with the default budgets: Redis is slow, never down. The
// breaker never opens, no failure is counted, no login (on_store_error
// closed) is denied for want of Redis, and the calls that ran out of their
// budget are counted slow and decided locally.
func TestLiveShortPausesAreNotAnOutage(t *testing.T) {
	if testing.Short() {
		t.Skip("starts redis-server")
	}
	srv := redistest.Start(t)
	s, sl := liveStore(t, srv, fallback.WithInstances(func() int { return 2 }))
	l := startLoad(s)
	time.Sleep(100 * time.Millisecond)
	for range 4 {
		srv.Pause()
		time.Sleep(30 * time.Millisecond)
		srv.Resume()
		time.Sleep(470 * time.Millisecond)
	}
	samples := l.stop()
	st := s.Stats()
	t.Logf("stats %+v", st)
	if ch := sl.changes(); len(ch) != 0 {
		t.Errorf("breaker changed state on a slow Redis: %v", ch)
	}
	if st.Failures != 0 || st.Opened != 0 {
		t.Errorf("failures counted on a slow Redis: %+v", st)
	}
	bySource := map[floodgate.Source]int{}
	for _, x := range samples {
		if x.err != nil {
			t.Fatalf("Take returned an error: %v", x.err)
		}
		bySource[x.res.Source]++
		if x.kind == kindClosed && x.res.Source == floodgate.SourceFailClosed {
			t.Errorf("a fail-closed rule denied on a slow Redis: %+v", x.res)
		}
	}
	t.Logf("decisions by source: %v", bySource)
	if st.Slow == 0 || bySource[floodgate.SourceLocalFallback] == 0 {
		t.Errorf("no call ran out of its budget during the pauses (slow %d, local %d): the test did not pause Redis", st.Slow, bySource[floodgate.SourceLocalFallback])
	}
}

// TestLiveCauses: the cause a failed call is counted under matches the
// fault: a killed Redis refuses, a paused one times out, a full one
// (maxmemory, noeviction) answers OOM.
func TestLiveCauses(t *testing.T) {
	if testing.Short() {
		t.Skip("starts redis-server")
	}
	b := []quota.Bucket{liveBuckets[kindOpen]}
	res := make([]quota.Result, 1)
	take := func(s *fallback.Store) {
		if _, err := s.Take(context.Background(), b, res); err != nil {
			t.Fatalf("Take: %v", err)
		}
	}
	for _, tc := range []struct {
		cause string
		fault func(*redistest.Server)
		heal  func(*redistest.Server)
	}{
		{fallback.CauseOOM, func(srv *redistest.Server) {
			c := srv.Client()
			if err := c.FlushAll(context.Background()).Err(); err != nil {
				t.Fatal(err)
			}
			if err := c.ConfigSet(context.Background(), "maxmemory-policy", "noeviction").Err(); err != nil {
				t.Fatal(err)
			}
			if err := c.ConfigSet(context.Background(), "maxmemory", "1").Err(); err != nil {
				t.Fatal(err)
			}
		}, nil},
		{fallback.CauseTimeout, func(srv *redistest.Server) { srv.Pause() }, func(srv *redistest.Server) { srv.Resume() }},
		{fallback.CauseRefused, func(srv *redistest.Server) { srv.Kill() }, nil},
	} {
		t.Run(tc.cause, func(t *testing.T) {
			srv := redistest.Start(t)
			s, _ := liveStore(t, srv, fallback.WithTimeout(20*time.Millisecond), fallback.WithSlowGrace(time.Nanosecond))
			take(s) // healthy: loads the script
			tc.fault(srv)
			if tc.heal != nil {
				defer tc.heal(srv)
			}
			for range 3 {
				take(s)
			}
			st := s.Stats()
			if st.Causes[tc.cause] == 0 || len(st.Causes) != 1 {
				t.Fatalf("causes %v, want only %s", st.Causes, tc.cause)
			}
		})
	}
}
