//go:build system

package fallback_test

import (
	"context"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sony/gobreaker/v2"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/fallback"
	"github.com/floodgate-go/floodgate/quota"
	"github.com/floodgate-go/floodgate/testing/redistest"
)

// The system tier of package fallback: fault tests that measure time on
// a real redis-server killed or paused under load. Each starts its own
// server on a free loopback port (testing/redistest) and drives a
// guarded Redis store with 8 goroutines, each bounded in count and time.
// Their bounds hold on a loaded 2-core machine (two CPU-bound processes
// beside the test, the race detector on): each is a count the scenario
// fixes, or a time many times what such a machine adds to it.
//
// The budget is 50ms rather than the 5ms default: under the race detector
// on a loaded machine a healthy Redis round trip can take tens of
// milliseconds, and a healthy call that times out reopens the breaker
// (correctly, but not what these tests are about).

const (
	liveWorkers   = 8
	liveMaxIter   = 20_000 // per worker
	liveMaxRun    = 20 * time.Second
	liveThinkTime = 300 * time.Microsecond

	// schedSlack is how late a goroutine of these tests may run after
	// it was due, on a loaded machine: the bound on what a decision may
	// take beyond its budget (or a timer fire late, or a worker run
	// between reading the clock and calling Take). With two CPU-bound
	// processes beside the test, decisions ran at most 16ms past their
	// budget; the decisions these tests are there to catch wait for
	// go-redis's own timeouts instead (1s to dial, 10s to read; see
	// liveStore).
	schedSlack = 250 * time.Millisecond
	// p99Slack bounds the 99th percentile of a fault's decisions beyond
	// the budget: a stall of the whole process delays the 8 decisions in
	// flight, and a fault's thousand or more decisions have fewer than 1%
	// over the budget unless several stalls longer than this one hit
	// them (the 99th percentile seen under load: 0.6ms over).
	p99Slack = 50 * time.Millisecond
)

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
	stopped   atomic.Bool
	fromStore atomic.Int64 // decisions Redis answered
	wg        sync.WaitGroup
	mu        sync.Mutex
	samples   []sample
	stalls    int
	longest   time.Duration
}

// stallMin: a goroutine that sleeps 200µs and wakes more than this later
// saw a stall of the process (the machine is shared, or the runtime
// stopped the world). The stalls are logged, to read a failure by.
const stallMin = time.Millisecond

func (l *load) watchStalls(deadline time.Time) {
	defer l.wg.Done()
	for !l.stopped.Load() && time.Now().Before(deadline) {
		t0 := time.Now()
		time.Sleep(200 * time.Microsecond)
		if gap := time.Since(t0); gap > stallMin {
			l.mu.Lock()
			l.stalls++
			l.longest = max(l.longest, gap)
			l.mu.Unlock()
		}
	}
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
				if res[0].Source == floodgate.SourceStore {
					l.fromStore.Add(1)
				}
				time.Sleep(liveThinkTime)
			}
			l.mu.Lock()
			l.samples = append(l.samples, mine...)
			l.mu.Unlock()
		}(w)
	}
	return l
}

// healthy waits (bounded) until Redis has answered 100 of the load's
// takes: the first ones (dialing, loading the script on a loaded machine)
// may run out of their budget.
func (l *load) healthy(t *testing.T) {
	t.Helper()
	if !waitFor(lateWait, func() bool { return l.fromStore.Load() >= 100 }) {
		t.Fatalf("Redis answered %d of the load's takes in %s, want 100 before the fault", l.fromStore.Load(), lateWait)
	}
}

func (l *load) stop() []sample {
	l.stopped.Store(true)
	l.wg.Wait()
	slices.SortFunc(l.samples, func(a, b sample) int { return a.start.Compare(b.start) })
	return l.samples
}

// first returns when the breaker first changed to state to at or after
// after.
func (sl *stateLog) first(to gobreaker.State, after time.Time) (time.Time, bool) {
	for _, c := range sl.changes() {
		if c.to == to && !c.at.Before(after) {
			return c.at, true
		}
	}
	return time.Time{}, false
}

// checkClosesAtFirstProbe asserts that the breaker closed at the first
// probe that began once the store was back (from: Restart or Resume
// returned, the server answering): every half-open from then until the
// breaker closed was followed by the close. A probe begun earlier may
// have failed and held the breaker open one more interval; none after.
// It returns when the breaker closed.
func checkClosesAtFirstProbe(t *testing.T, sl *stateLog, from time.Time) time.Time {
	t.Helper()
	closed, ok := sl.first(gobreaker.StateClosed, from)
	if !ok {
		t.Fatalf("the breaker never closed after the store came back; changes %v", sl.changes())
	}
	ch := sl.changes()
	for i, c := range ch {
		if c.at.Before(from) || c.at.After(closed) || c.to != gobreaker.StateHalfOpen {
			continue
		}
		if i+1 < len(ch) && ch[i+1].to != gobreaker.StateClosed {
			t.Errorf("a probe begun %s after the store came back did not close the breaker: it went %s; changes %v",
				c.at.Sub(from), ch[i+1].to, ch)
		}
	}
	return closed
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

// checkLatency asserts that every decision started in [from, to) took at
// most budget + schedSlack, and the 99th percentile of them at most
// budget + p99Slack: no decision waits for go-redis's own timeouts (1s)
// instead of its budget, and the bulk of them are decided within the
// budget plus what a loaded machine adds.
func checkLatency(t *testing.T, l *load, samples []sample, from, to time.Time, budget time.Duration) {
	t.Helper()
	var lats []time.Duration
	for _, x := range samples {
		if x.start.Before(from) || !x.start.Before(to) {
			continue
		}
		lats = append(lats, x.lat)
		if x.lat > budget+schedSlack {
			t.Errorf("decision +%s took %s, want <= %s: %+v", x.start.Sub(from), x.lat, budget+schedSlack, x.res)
		}
	}
	if len(lats) == 0 {
		t.Fatal("no decisions to time")
	}
	slices.Sort(lats)
	p99 := lats[len(lats)*99/100]
	if p99 > budget+p99Slack {
		t.Errorf("p99 decision latency %s, want <= %s", p99, budget+p99Slack)
	}
	l.mu.Lock()
	stalls, longest := l.stalls, l.longest
	l.mu.Unlock()
	t.Logf("%d decisions, p99 %s, max %s; %d stalls of the process > %s, the longest %s",
		len(lats), p99, lats[len(lats)-1], stalls, stallMin, longest)
}

// checkLocalBound asserts the local bucket admitted no more than its local
// share (burst 20/2 = 10, rate 200/2 = 100/s) over the span of its local
// decisions started in [from, to), an outage (exact: Redis answers
// nothing then, so nothing refills the local limiter but its rate, read
// on the same clock), and that it did deny (the limit really bound: the 8
// workers ask for it far more often than 100 times a second, even slowed
// down tenfold by a loaded machine).
func checkLocalBound(t *testing.T, samples []sample, from, to time.Time) {
	t.Helper()
	var first, last time.Time
	allowed, denied := 0, 0
	for _, s := range samples {
		if s.start.Before(from) || !s.start.Before(to) || s.kind != kindLocal || s.res.Source != floodgate.SourceLocalFallback {
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

// TestLiveKill kills Redis under load, once Redis has answered 100 of its
// takes, restarts it a second later, and asserts:
//   - no caller sees an error;
//   - every decision after the kill took at most its budget plus
//     schedSlack (250ms), the 99th percentile at most the budget plus
//     p99Slack (50ms), the budget being the closed one (250ms) that a
//     probe waits: a refused call fails at once, so the decisions that
//     break these wait for a timeout of go-redis (1s to dial);
//   - the breaker opened after its 3 failures and kept calls off Redis;
//     between its opening and the restart every rule acted by its
//     on_store_error (those started in the last schedSlack before the
//     restart excepted: a worker delayed that long may reach the new
//     server), every mode was exercised, and the local bucket stayed
//     within its share of the span (an exact bound: it reads the same
//     clock); Stats counted what callers saw (counts, exact);
//   - once Restart returned (the server answering PING), the first probe
//     closed the breaker (an order: a probe begun before may have failed,
//     and cost one more open interval, none after), and Redis decided
//     again; a later reopening came from a real failure.
func TestLiveKill(t *testing.T) {
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
	l.healthy(t)
	srv.Kill()
	killed := time.Now()
	time.Sleep(time.Second) // several open intervals with failed probes
	before := s.Stats()
	// The outage ends when Restart starts (the new process may answer
	// before Restart returns); recovery is timed from its return, when the
	// server answers PING.
	outageEnd := time.Now()
	srv.Restart()
	restarted := time.Now()
	if !waitFor(openFor+10*time.Second, func() bool { return s.State() == gobreaker.StateClosed }) {
		t.Errorf("breaker still %s %s after the restart", s.State(), openFor+10*time.Second)
	}
	// Load on the closed breaker: takes answered by Redis again.
	closedNow := time.Now()
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
	checkLatency(t, l, samples, killed, time.Now().Add(time.Hour), fallback.DefaultClosedTimeout)
	// The breaker opened after the configured failures.
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
	counts := checkOutage(t, samples, opened, outageEnd.Add(-schedSlack), retryAfter)
	if counts[floodgate.SourceFailClosed] == 0 || counts[floodgate.SourceFailOpen] == 0 || counts[floodgate.SourceLocalFallback] == 0 {
		t.Errorf("outage decisions by source %v, want every mode exercised", counts)
	}
	checkLocalBound(t, samples, opened, outageEnd.Add(-schedSlack))
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
	// After the restart the first probe closes the breaker, and decisions
	// come from Redis again.
	closedAt := checkClosesAtFirstProbe(t, sl, restarted)
	t.Logf("breaker closed %s after the restart", closedAt.Sub(restarted))
	back := 0
	for _, x := range samples {
		if !x.start.Before(closedNow) && x.res.Source == floodgate.SourceStore {
			back++
		}
	}
	if back == 0 {
		t.Error("no decision came from Redis in the 100ms after the breaker closed")
	}
	// A later reopening is legitimate only if a call really failed (on a
	// loaded machine a stall can push a call past its budget).
	if st.Opened > before.Opened+1 && st.Failures == before.Failures {
		t.Errorf("breaker reopened after the restart without a failure: %+v", st)
	}
}

// TestLivePause stops Redis (SIGSTOP) for a second under load, once Redis
// has answered 100 of its takes, and asserts:
//   - no caller sees an error; no call started in the pause was answered
//     by Redis (but those started within a budget and schedSlack of its
//     end: a timer that fired that late lets the resumed server answer);
//   - calls time out at the budget: timeouts were counted and decisions
//     waited the budget; every decision in the pause took at most the
//     budget (50ms) plus schedSlack (250ms), the 99th percentile at most
//     the budget plus p99Slack (50ms): decisions that wait for go-redis's
//     read timeout (10s, see liveStore) instead break both;
//   - timeouts within the slow grace (200ms) of Redis's last answer are
//     slow, not failures: the breaker opened no sooner than the grace
//     after the start of the last take Redis answered (exact: that answer
//     came after its start, and the grace runs from it), and no later
//     than 6 budgets after the grace into the pause (once the grace is
//     over, the 8 calls in flight time out within a budget; seen under
//     load: 100ms after it at most);
//   - from the opening to the end of the pause every rule acted by its
//     on_store_error, every mode was exercised, and the local bucket
//     stayed within its share;
//   - once Resume returned, the first probe closed the breaker (as in
//     TestLiveKill; a probe, which waits the closed budget of 50ms, is
//     answered by a running Redis in a few milliseconds under load).
func TestLivePause(t *testing.T) {
	const (
		budget     = 50 * time.Millisecond
		grace      = 200 * time.Millisecond
		openFor    = 200 * time.Millisecond
		pause      = time.Second
		failures   = 3
		retryAfter = quota.StoreErrorRetryAfter
	)
	srv := redistest.Start(t)
	// A pause longer than the slow grace is an outage: once Redis has not
	// answered anything for the grace, timeouts count and open the breaker.
	s, sl := liveStore(t, srv, fallback.WithTimeout(budget), fallback.WithClosedTimeout(budget), fallback.WithSlowGrace(grace),
		fallback.WithFailures(failures), fallback.WithOpenInterval(openFor), fallback.WithInstances(func() int { return 2 }))

	l := startLoad(s)
	l.healthy(t)
	srv.Pause()
	// SIGSTOP is asynchronous: give it a moment before judging decisions.
	paused := time.Now().Add(time.Millisecond)
	time.Sleep(pause)
	pauseEnd := time.Now() // decisions after SIGCONT may come from Redis
	srv.Resume()
	resumed := time.Now()
	if !waitFor(openFor+10*time.Second, func() bool { return s.State() == gobreaker.StateClosed }) {
		t.Errorf("breaker still %s %s after resuming", s.State(), openFor+10*time.Second)
	}
	time.Sleep(100 * time.Millisecond)
	samples := l.stop()
	st := s.Stats()
	t.Logf("stats %+v", st)

	for _, x := range samples {
		if x.err != nil {
			t.Fatalf("Take returned an error to the caller: %v", x.err)
		}
	}
	// Calls to the paused Redis time out at the budget and fall back; a
	// call started in the last budget of the pause (and schedSlack, for a
	// timer that fires late) may be answered.
	judged := pauseEnd.Add(-budget - schedSlack)
	timedOut := 0
	for _, x := range samples {
		if x.start.Before(paused) || !x.start.Before(pauseEnd) {
			continue
		}
		if x.res.Source == floodgate.SourceStore && x.start.Before(judged) {
			t.Errorf("decision from the store %s into the pause: %+v", x.start.Sub(paused), x.res)
		}
		if x.lat >= budget {
			timedOut++
		}
	}
	if st.Timeouts < failures || timedOut == 0 {
		t.Errorf("%d timeouts counted, %d decisions waited the budget; want >= %d and some", st.Timeouts, timedOut, failures)
	}
	checkLatency(t, l, samples, paused, pauseEnd, budget)
	opened, ok := sl.first(gobreaker.StateOpen, paused)
	if !ok {
		t.Fatalf("breaker never opened; changes %v", sl.changes())
	}
	// The last take Redis answered before the opening started at last.
	var last time.Time
	for _, x := range samples {
		if x.res.Source == floodgate.SourceStore && !x.start.Add(x.lat).After(opened) {
			last = x.start
		}
	}
	if last.IsZero() {
		t.Fatal("no take was answered by Redis before the pause")
	}
	if d := opened.Sub(last); d < grace {
		t.Errorf("breaker opened %s after the start of the last take Redis answered, want after the grace %s", d, grace)
	}
	if d := opened.Sub(paused); d > grace+6*budget {
		t.Errorf("breaker opened %s into the pause, want within 6 budgets (%s) of the grace %s", d, budget, grace)
	}
	if st.Slow == 0 {
		t.Errorf("no call was counted slow during the grace: %+v", st)
	}
	t.Logf("breaker opened %s into the pause, %s after the start of the last take Redis answered", opened.Sub(paused), opened.Sub(last))
	counts := checkOutage(t, samples, opened, judged, retryAfter)
	if counts[floodgate.SourceFailClosed] == 0 || counts[floodgate.SourceFailOpen] == 0 || counts[floodgate.SourceLocalFallback] == 0 {
		t.Errorf("pause decisions by source %v, want every mode exercised", counts)
	}
	checkLocalBound(t, samples, opened, judged)
	closedAt := checkClosesAtFirstProbe(t, sl, resumed)
	t.Logf("breaker closed %s after resuming", closedAt.Sub(resumed))
}

// TestLiveShortPausesAreNotAnOutage pauses Redis for 30ms every 500ms
// under load with the default budgets but a closed one of 1s: Redis is
// slow, never down. The breaker never opens, no failure is counted, no
// login (on_store_error closed) is denied for want of Redis, and the
// calls that ran out of their budget are counted slow and decided
// locally. The bounds: a pause ends, and Redis works off what queued
// behind it, well within the closed budget even on a loaded machine (with
// the default 250ms, two logins of 3000 calls were denied there), while a
// login decided on the call budget (5ms) would be denied in every pause;
// no call runs out of its budget 1s (the slow grace) after Redis last
// answered.
func TestLiveShortPausesAreNotAnOutage(t *testing.T) {
	srv := redistest.Start(t)
	s, sl := liveStore(t, srv, fallback.WithInstances(func() int { return 2 }), fallback.WithClosedTimeout(time.Second))
	l := startLoad(s)
	l.healthy(t)
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

// TestLiveLoadedStoreStaysOnStore: a Redis kept busy by 8 ms scripts
// answers every take, but a take waits for the script running when it
// arrives, 0 to 8 ms: with a fixed 5 ms budget about three in eight would
// be decided locally though Redis answers them all. The budget follows
// the latency instead (RFC 6298), so once it has learnt it, the takes
// are answered by Redis: in the last 200 of 250, at most 10 are decided
// locally (calls the host delayed past even the learnt budget: with two
// CPU-bound processes beside the test under the race detector, 2 to 4,
// the budget grown to 70-240ms; 162 with the budget fixed at 5 ms), and
// the budget has grown past 8 ms.
func TestLiveLoadedStoreStaysOnStore(t *testing.T) {
	srv := redistest.Start(t)
	s, _ := liveStore(t, srv, fallback.WithTimeout(5*time.Millisecond))
	b := tokenBucket("loaded", 1, 1_000_000, time.Hour, quota.FailLocal)
	take(t, s, b) // dial and load the script before the load starts

	stop := make(chan struct{})
	busy := make(chan struct{})
	go func() {
		defer close(busy)
		c := srv.Client()
		for range 2000 { // 16 s at most; the takes end far sooner
			select {
			case <-stop:
				return
			default:
			}
			_ = c.Do(context.Background(), "eval", "local t = redis.call('TIME') while true do local u = redis.call('TIME'); if (u[1]-t[1])*1000000 + (u[2]-t[2]) > 8000 then break end end return 1", 0).Err()
		}
	}()
	defer func() { close(stop); <-busy }()

	local := 0
	for i := range 250 {
		_, res := take(t, s, b)
		if i >= 50 && res[0].Source == floodgate.SourceLocalFallback {
			local++
		}
	}
	st := s.Stats()
	t.Logf("budget %s, slow %d, decided locally in the last 200: %d", st.Budget, st.Slow, local)
	if local > 10 {
		t.Errorf("%d of the last 200 takes decided locally on a busy but answering Redis, want at most 10 (budget %s)", local, st.Budget)
	}
	if st.Budget <= 8*time.Millisecond {
		t.Errorf("budget %s after 250 takes that waited up to 8ms, want more than 8ms", st.Budget)
	}
}
