package fallback_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/sony/gobreaker/v2"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/fallback"
	"github.com/floodgate-go/floodgate/quota"
	"github.com/floodgate-go/floodgate/testing/clock"
)

var errDown = errors.New("flaky: store down")

// flaky wraps a real store and fails, or hangs until its context ends, on
// command. It counts the calls that reach it.
type flaky struct {
	inner quota.Store
	fail  atomic.Bool
	hang  atomic.Bool
	calls atomic.Int64
	// gate, when non-nil, holds every call until it is closed.
	gateMu sync.Mutex
	gate   chan struct{}
}

func (f *flaky) Take(ctx context.Context, b []quota.Bucket, r []quota.Result) (bool, error) {
	f.calls.Add(1)
	f.gateMu.Lock()
	g := f.gate
	f.gateMu.Unlock()
	if g != nil {
		select {
		case <-g:
		case <-ctx.Done():
			return false, ctx.Err()
		}
	}
	if f.hang.Load() {
		<-ctx.Done()
		return false, ctx.Err()
	}
	if f.fail.Load() {
		return false, errDown
	}
	return f.inner.Take(ctx, b, r)
}

// logBuffer is a concurrency-safe buffer for a slog text handler.
type logBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

type transition struct{ from, to gobreaker.State }

type fixture struct {
	clk   *clock.Fake
	inner quota.Store
	f     *flaky
	s     *fallback.Store
	logs  *logBuffer
	mu    sync.Mutex
	trans []transition
}

func (fx *fixture) transitions() []transition {
	fx.mu.Lock()
	defer fx.mu.Unlock()
	return append([]transition(nil), fx.trans...)
}

func newFixture(t *testing.T, opts ...fallback.Option) *fixture {
	t.Helper()
	fx := &fixture{clk: clock.New(time.Time{}), logs: &logBuffer{}}
	fx.inner = newMemStore(t, fx.clk)
	fx.f = &flaky{inner: fx.inner}
	all := []fallback.Option{
		fallback.WithClock(fx.clk),
		fallback.WithLogger(slog.New(slog.NewTextHandler(fx.logs, nil))),
		fallback.WithOnStateChange(func(name string, from, to gobreaker.State) {
			fx.mu.Lock()
			fx.trans = append(fx.trans, transition{from, to})
			fx.mu.Unlock()
		}),
	}
	s, err := fallback.New(fx.f, append(all, opts...)...)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	fx.s = s
	return fx
}

func tokenBucket(key string, rate, burst int64, period time.Duration, mode quota.FailMode) quota.Bucket {
	return quota.Bucket{
		Key:          key,
		Limit:        quota.Limit{Algorithm: quota.TokenBucket, Rate: rate, Period: period, Burst: burst},
		Cost:         1,
		OnStoreError: mode,
	}
}

func take(t *testing.T, s quota.Store, buckets ...quota.Bucket) (bool, []quota.Result) {
	t.Helper()
	res := make([]quota.Result, len(buckets))
	ok, err := s.Take(context.Background(), buckets, res)
	if err != nil {
		t.Fatalf("Take: unexpected error %v", err)
	}
	return ok, res
}

// trip fails the primary and takes until the breaker opens, asserting it
// opens after exactly n failures.
func trip(t *testing.T, fx *fixture, n int, b ...quota.Bucket) {
	t.Helper()
	fx.f.fail.Store(true)
	for i := 1; i <= n; i++ {
		if got := fx.s.State(); got != gobreaker.StateClosed {
			t.Fatalf("breaker %s after %d failures, want closed until %d", got, i-1, n)
		}
		take(t, fx.s, b...)
	}
	if got := fx.s.State(); got != gobreaker.StateOpen {
		t.Fatalf("breaker %s after %d failures, want open", got, n)
	}
}

func TestNewRejectsBadOptions(t *testing.T) {
	t.Parallel()
	p := &flaky{}
	cases := []struct {
		name string
		opt  fallback.Option
		want string
	}{
		{"timeout", fallback.WithTimeout(0), "WithTimeout(0s)"},
		{"failures", fallback.WithFailures(0), "WithFailures(0)"},
		{"open", fallback.WithOpenInterval(-time.Second), "WithOpenInterval(-1s)"},
		{"probes", fallback.WithProbes(0), "WithProbes(0)"},
		{"instances", fallback.WithInstances(nil), "WithInstances(nil)"},
		{"closed timeout", fallback.WithClosedTimeout(0), "WithClosedTimeout(0s)"},
		{"closed timeout below budget", fallback.WithClosedTimeout(time.Microsecond), "shorter than the call budget"},
		{"slow grace", fallback.WithSlowGrace(0), "WithSlowGrace(0s)"},
		{"capacity", fallback.WithLocalCapacity(0), "WithLocalCapacity(0)"},
		{"clock", fallback.WithClock(nil), "WithClock(nil)"},
		{"logger", fallback.WithLogger(nil), "WithLogger(nil)"},
		{"name", fallback.WithName(""), "WithName"},
		{"callback", fallback.WithOnStateChange(nil), "WithOnStateChange(nil)"},
		{"nil option", nil, "nil Option"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s, err := fallback.New(p, c.opt)
			if err == nil || s != nil {
				t.Fatalf("New accepted %s", c.name)
			}
			if !strings.Contains(err.Error(), c.want) {
				t.Fatalf("error %q does not name %q", err, c.want)
			}
		})
	}
	if _, err := fallback.New(nil); err == nil || !strings.Contains(err.Error(), "primary") {
		t.Fatalf("New(nil) error = %v, want one naming the primary store", err)
	}
}

func TestTakeRejectsBadInputWithoutTrippingBreaker(t *testing.T) {
	t.Parallel()
	fx := newFixture(t, fallback.WithFailures(1), fallback.WithOpenInterval(time.Hour))
	ok1 := quota.Limit{Rate: 1, Period: time.Second, Burst: 1}
	bad := [][]quota.Bucket{
		{{Key: "rate0", Limit: quota.Limit{Rate: 0, Period: time.Second, Burst: 1}, Cost: 1}},
		{{Key: "negcost", Limit: ok1, Cost: -1}},
		{{Key: "dup", Limit: ok1, Cost: 1}, {Key: "dup", Limit: ok1, Cost: 1}},
	}
	badMode := []quota.Bucket{{Key: "mode", Limit: ok1, Cost: 1, OnStoreError: 7}}
	check := func(phase string, bs []quota.Bucket) {
		t.Helper()
		_, err := fx.s.Take(context.Background(), bs, make([]quota.Result, len(bs)))
		if err == nil || !strings.Contains(err.Error(), bs[len(bs)-1].Key) {
			t.Errorf("%s, bucket %q: error %v, want one naming the bucket", phase, bs[len(bs)-1].Key, err)
		}
	}
	// Healthy primary: it refuses the input; that is not a store failure.
	for _, bs := range bad {
		check("healthy", bs)
	}
	// Failing primary: the input is checked before the fail mode decides.
	fx.f.fail.Store(true)
	for _, bs := range append(bad, badMode) {
		check("failing", bs)
	}
	if st := fx.s.Stats(); st.State != gobreaker.StateClosed || st.Failures != 0 {
		t.Fatalf("stats after bad input: %+v, want closed and no failures", st)
	}
	// Open breaker: checked too.
	trip(t, fx, 1, tokenBucket("k", 1, 1, time.Second, quota.FailLocal))
	for _, bs := range append(bad, badMode) {
		check("open", bs)
	}
	b := tokenBucket("k", 1, 1, time.Second, quota.FailLocal)
	if _, err := fx.s.Take(context.Background(), []quota.Bucket{b, b}, make([]quota.Result, 1)); err == nil || !strings.Contains(err.Error(), "res has room for 1 results, want one per bucket (2)") {
		t.Errorf("short res: error %v", err)
	}
	if st := fx.s.Stats(); st.Failures != 1 || st.Mode(quota.FailLocal).Allowed != 1 {
		t.Fatalf("stats %+v: bad input was decided or counted", st)
	}
}

func TestHealthyPathDelegatesAndDenyIsSuccess(t *testing.T) {
	t.Parallel()
	fx := newFixture(t, fallback.WithFailures(1))
	b := tokenBucket("user:1", 3, 3, time.Second, quota.FailLocal)
	for i := 0; i < 3; i++ {
		ok, res := take(t, fx.s, b)
		if !ok || res[0].Source.Degraded() {
			t.Fatalf("take %d: allowed=%v source=%q, want allowed by the store", i, ok, res[0].Source)
		}
		if res[0].Remaining != int64(2-i) {
			t.Fatalf("take %d: remaining %d, want %d", i, res[0].Remaining, 2-i)
		}
	}
	// Ten denies in a row from the store: successes, the breaker stays closed.
	for i := 0; i < 10; i++ {
		ok, res := take(t, fx.s, b)
		if ok || res[0].Source.Degraded() || res[0].RetryAfter <= 0 {
			t.Fatalf("deny %d: allowed=%v source=%q retry=%s", i, ok, res[0].Source, res[0].RetryAfter)
		}
	}
	st := fx.s.Stats()
	if st.State != gobreaker.StateClosed || st.Calls != 13 || st.Failures != 0 || st.FallbackTakesAllowed+st.FallbackTakesDenied != 0 {
		t.Fatalf("stats %+v, want 13 calls, closed, no failures, no fallback", st)
	}
	if got := fx.f.calls.Load(); got != 13 {
		t.Fatalf("primary saw %d calls, want 13", got)
	}
}

func TestBreakerOpensAfterConfiguredFailures(t *testing.T) {
	t.Parallel()
	fx := newFixture(t, fallback.WithFailures(3), fallback.WithOpenInterval(time.Hour))
	b := tokenBucket("user:1", 100, 100, time.Second, quota.FailOpen)
	trip(t, fx, 3, b)
	for i := 0; i < 5; i++ {
		ok, res := take(t, fx.s, b)
		if !ok || res[0].Source != floodgate.SourceFailOpen {
			t.Fatalf("open breaker take %d: allowed=%v source=%q", i, ok, res[0].Source)
		}
	}
	if got := fx.f.calls.Load(); got != 3 {
		t.Fatalf("primary saw %d calls, want 3 (none while open)", got)
	}
	st := fx.s.Stats()
	if st.Failures != 3 || st.Rejected != 5 || st.Opened != 1 || st.Mode(quota.FailOpen).Allowed != 8 {
		t.Fatalf("stats %+v: want 3 failures, 5 rejected, 1 open, 8 fail-open allows", st)
	}
	if got := fx.transitions(); len(got) != 1 || got[0] != (transition{gobreaker.StateClosed, gobreaker.StateOpen}) {
		t.Fatalf("transitions %v, want closed->open", got)
	}
	if logs := fx.logs.String(); !strings.Contains(logs, "circuit breaker opened") || !strings.Contains(logs, errDown.Error()) {
		t.Fatalf("log does not report the opening and its cause:\n%s", logs)
	}
}

func TestFailuresMustBeConsecutive(t *testing.T) {
	t.Parallel()
	fx := newFixture(t, fallback.WithFailures(3))
	b := tokenBucket("user:1", 100, 100, time.Second, quota.FailLocal)
	for i := 0; i < 4; i++ {
		fx.f.fail.Store(true)
		take(t, fx.s, b)
		take(t, fx.s, b)
		fx.f.fail.Store(false)
		take(t, fx.s, b)
	}
	if st := fx.s.Stats(); st.State != gobreaker.StateClosed || st.Failures != 8 {
		t.Fatalf("stats %+v: want closed after 8 non-consecutive failures", st)
	}
}

// TestLocalLimitIsRateOverReplicas holds a bucket of 400/s, burst 40, on an
// instance of 4 replicas: locally 100/s with a burst of 10, exactly.
func TestLocalLimitIsRateOverReplicas(t *testing.T) {
	t.Parallel()
	fx := newFixture(t, fallback.WithFailures(1), fallback.WithInstances(func() int { return 4 }), fallback.WithOpenInterval(time.Hour))
	b := tokenBucket("user:1", 400, 40, time.Second, quota.FailLocal)
	trip(t, fx, 1, b) // the tripping call itself was decided locally: 1 token
	allowed := 1
	for i := 0; i < 20; i++ {
		ok, res := take(t, fx.s, b)
		if res[0].Source != floodgate.SourceLocalFallback || res[0].Limit != 10 {
			t.Fatalf("source %q limit %d, want local_fallback with the local burst 10", res[0].Source, res[0].Limit)
		}
		if ok {
			allowed++
			if res[0].Remaining != int64(10-allowed) {
				t.Fatalf("remaining %d after %d allowed, want %d", res[0].Remaining, allowed, 10-allowed)
			}
		} else if res[0].RetryAfter != 10*time.Millisecond {
			t.Fatalf("retry-after %s, want 10ms (1 token at 100/s)", res[0].RetryAfter)
		}
	}
	if allowed != 10 {
		t.Fatalf("burst: %d allowed at one instant, want 10", allowed)
	}
	// One second of requests every 1ms: 100 more, exactly.
	allowed = 0
	for i := 0; i < 1000; i++ {
		fx.clk.Advance(time.Millisecond)
		if ok, _ := take(t, fx.s, b); ok {
			allowed++
		}
	}
	if allowed != 100 {
		t.Fatalf("%d allowed over 1s at 1ms spacing, want 100 (400/s over 4 replicas)", allowed)
	}
	st := fx.s.Stats()
	local := st.Mode(quota.FailLocal)
	if local.Allowed != 110 || local.Denied != 911 {
		t.Fatalf("local counts %+v, want 110 allowed, 911 denied", local)
	}
}

func TestLocalWindowAlgorithmShare(t *testing.T) {
	t.Parallel()
	fx := newFixture(t, fallback.WithFailures(1), fallback.WithInstances(func() int { return 3 }), fallback.WithOpenInterval(time.Hour))
	b := quota.Bucket{Key: "ip:1", Limit: quota.Limit{Algorithm: quota.FixedWindow, Rate: 60, Period: time.Minute}, Cost: 1}
	trip(t, fx, 1, b)
	allowed := 1
	for i := 0; i < 30; i++ {
		if ok, _ := take(t, fx.s, b); ok {
			allowed++
		}
	}
	if allowed != 20 {
		t.Fatalf("%d allowed, want 20 (60 per minute over 3 replicas)", allowed)
	}
	fx.clk.Advance(3 * time.Second) // 20/min = one every 3s
	if ok, _ := take(t, fx.s, b); !ok {
		t.Fatal("denied after 3s, want one more token")
	}
	if ok, res := take(t, fx.s, b); ok || res[0].RetryAfter != 3*time.Second {
		t.Fatalf("allowed=%v retry=%s, want denied with 3s", ok, res[0].RetryAfter)
	}
}

func TestLocalAllOrNothing(t *testing.T) {
	t.Parallel()
	fx := newFixture(t, fallback.WithFailures(1), fallback.WithOpenInterval(time.Hour))
	user := tokenBucket("user:1", 1, 2, time.Minute, quota.FailLocal)
	ip := tokenBucket("ip:1", 100, 100, time.Minute, quota.FailLocal)
	trip(t, fx, 1, user, ip) // charges 1 to each
	ok, res := take(t, fx.s, user, ip)
	if !ok || res[1].Remaining != 98 || res[0].Remaining != 0 {
		t.Fatalf("second take: allowed=%v results %+v", ok, res)
	}
	for i := 0; i < 5; i++ {
		ok, res = take(t, fx.s, user, ip)
		if ok || res[0].Allowed || !res[1].Allowed || res[1].Remaining != 98 {
			t.Fatalf("take %d: allowed=%v results %+v, want user deny and ip untouched at 98", i, ok, res)
		}
		if res[0].RetryAfter != time.Minute {
			t.Fatalf("retry-after %s, want 1m (1 per minute)", res[0].RetryAfter)
		}
	}
	// The ip bucket alone still has its 98 tokens: nothing was charged.
	for i := 0; i < 98; i++ {
		if ok, _ := take(t, fx.s, ip); !ok {
			t.Fatalf("ip take %d denied: a denied hierarchical take charged it", i)
		}
	}
	if ok, _ := take(t, fx.s, ip); ok {
		t.Fatal("ip allowed a 101st unit within the same instant")
	}
}

func TestOpenAndClosedModes(t *testing.T) {
	t.Parallel()
	fx := newFixture(t, fallback.WithFailures(1), fallback.WithOpenInterval(time.Hour))
	login := tokenBucket("login:ip", 5, 5, time.Minute, quota.FailClosed)
	search := tokenBucket("search:user", 10, 10, time.Second, quota.FailOpen)
	local := tokenBucket("tenant:acme", 100, 100, time.Second, quota.FailLocal)
	login.Rule, search.Rule, local.Rule = "login-ip", "search-user", "tenant-plan"
	fx.f.fail.Store(true)

	ok, res := take(t, fx.s, login)
	if ok || res[0].Source != floodgate.SourceFailClosed || res[0].RetryAfter != quota.StoreErrorRetryAfter || res[0].Remaining != 0 {
		t.Fatalf("closed: allowed=%v %+v, want deny from fail_closed with StoreErrorRetryAfter", ok, res[0])
	}
	for i := 0; i < 50; i++ {
		ok, res = take(t, fx.s, search)
		if !ok || res[0].Source != floodgate.SourceFailOpen || res[0].Limit != 10 || res[0].Remaining != 9 {
			t.Fatalf("open: allowed=%v %+v", ok, res[0])
		}
	}
	// Closed + local: denied, the local bucket is not charged.
	for i := 0; i < 3; i++ {
		ok, res = take(t, fx.s, login, local)
		if ok || res[1].Source != floodgate.SourceLocalFallback || !res[1].Allowed || res[1].Remaining != 100 {
			t.Fatalf("closed+local: allowed=%v %+v", ok, res)
		}
	}
	// Open + local: the local bucket decides.
	ok, res = take(t, fx.s, search, local)
	if !ok || res[0].Source != floodgate.SourceFailOpen || res[1].Source != floodgate.SourceLocalFallback || res[1].Remaining != 99 {
		t.Fatalf("open+local: allowed=%v %+v", ok, res)
	}
	st := fx.s.Stats()
	want := [3]fallback.ModeCount{
		quota.FailLocal:  {Allowed: 4},
		quota.FailOpen:   {Allowed: 51},
		quota.FailClosed: {Denied: 4},
	}
	if st.Fallback != want || st.FallbackTakesAllowed != 51 || st.FallbackTakesDenied != 4 {
		t.Fatalf("stats %+v, want modes %+v, 51 takes allowed, 4 denied", st, want)
	}
	wantRules := map[string][3]fallback.ModeCount{
		"login-ip":    {quota.FailClosed: {Denied: 4}},
		"search-user": {quota.FailOpen: {Allowed: 51}},
		"tenant-plan": {quota.FailLocal: {Allowed: 4}},
	}
	if !reflect.DeepEqual(st.ByRule, wantRules) {
		t.Fatalf("ByRule = %+v, want %+v", st.ByRule, wantRules)
	}
}

func TestByRuleIsBounded(t *testing.T) {
	t.Parallel()
	fx := newFixture(t, fallback.WithFailures(1), fallback.WithOpenInterval(time.Hour))
	fx.f.fail.Store(true)
	for i := 0; i < fallback.MaxRules+10; i++ {
		b := tokenBucket("k:"+strconv.Itoa(i), 10, 10, time.Second, quota.FailOpen)
		b.Rule = "rule-" + strconv.Itoa(i)
		take(t, fx.s, b)
	}
	st := fx.s.Stats()
	if len(st.ByRule) != fallback.MaxRules+1 {
		t.Fatalf("ByRule has %d entries, want %d named + %s", len(st.ByRule), fallback.MaxRules, fallback.OtherRule)
	}
	if got := st.ByRule[fallback.OtherRule][quota.FailOpen].Allowed; got != 10 {
		t.Fatalf("%s counted %d, want the 10 rules past MaxRules", fallback.OtherRule, got)
	}
}

func TestCostAboveCapacityNeverAdmitted(t *testing.T) {
	t.Parallel()
	fx := newFixture(t, fallback.WithFailures(1), fallback.WithOpenInterval(time.Hour), fallback.WithInstances(func() int { return 4 }))
	fx.f.fail.Store(true)
	for _, mode := range []quota.FailMode{quota.FailLocal, quota.FailOpen, quota.FailClosed} {
		b := tokenBucket("k:"+mode.String(), 10, 10, time.Second, mode)
		b.Cost = 11
		if ok, res := take(t, fx.s, b); ok || res[0].RetryAfter != quota.Never {
			t.Errorf("%s: allowed=%v retry=%s, want deny with Never", mode, ok, res[0].RetryAfter)
		}
	}
	// Within capacity but above the local share (10/4 = 2): denied, retry
	// after the configured retry-after, not Never.
	b := tokenBucket("k:share", 10, 10, time.Second, quota.FailLocal)
	b.Cost = 3
	if ok, res := take(t, fx.s, b); ok || res[0].RetryAfter != quota.StoreErrorRetryAfter || res[0].Limit != 2 {
		t.Errorf("above local share: allowed=%v %+v", ok, res[0])
	}
}

// TestBreakerClosesAfterOpenIntervalAndOneProbe: an open breaker decides
// locally without asking the primary until its open interval (real time,
// gobreaker's) has passed, then lets one probe through, which closes it.
// The interval opened between tripping and tripped: a take before
// tripping+interval is decided locally (checked only if this goroutine
// ran that soon on a loaded machine), and the probe is sent after a sleep
// to tripped+interval.
func TestBreakerClosesAfterOpenIntervalAndOneProbe(t *testing.T) {
	t.Parallel()
	const open = 150 * time.Millisecond
	fx := newFixture(t, fallback.WithFailures(2), fallback.WithOpenInterval(open))
	b := tokenBucket("user:1", 1000, 1000, time.Second, quota.FailLocal)
	tripping := time.Now()
	trip(t, fx, 2, b)
	tripped := time.Now()
	fx.f.fail.Store(false)
	// Before the interval: still decided locally, the primary is not asked.
	_, res := take(t, fx.s, b)
	if time.Since(tripping) < open && res[0].Source != floodgate.SourceLocalFallback {
		t.Fatalf("source %q right after opening, want local_fallback", res[0].Source)
	}
	calls := fx.f.calls.Load()
	time.Sleep(time.Until(tripped.Add(open + time.Millisecond)))
	_, res = take(t, fx.s, b) // the probe
	if res[0].Source.Degraded() {
		t.Fatalf("probe after the open interval: source %q, want the store", res[0].Source)
	}
	if got := fx.f.calls.Load() - calls; got != 1 {
		t.Fatalf("%d calls reached the primary, want 1 probe", got)
	}
	if st := fx.s.State(); st != gobreaker.StateClosed {
		t.Fatalf("state %s after one successful probe, want closed", st)
	}
	want := []transition{
		{gobreaker.StateClosed, gobreaker.StateOpen},
		{gobreaker.StateOpen, gobreaker.StateHalfOpen},
		{gobreaker.StateHalfOpen, gobreaker.StateClosed},
	}
	got := fx.transitions()
	if len(got) != len(want) {
		t.Fatalf("transitions %v, want %v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("transitions %v, want %v", got, want)
		}
	}
	if logs := fx.logs.String(); !strings.Contains(logs, "half-open") || !strings.Contains(logs, "circuit breaker closed") {
		t.Fatalf("log misses the transitions:\n%s", logs)
	}
	if st := fx.s.Stats(); st.Opened != 1 || st.HalfOpened != 1 || st.Closed != 1 {
		t.Fatalf("transition counts %+v", st)
	}
	// Closed again: healthy calls, then exactly 2 failures trip it again.
	for i := 0; i < 5; i++ {
		if _, res := take(t, fx.s, b); res[0].Source.Degraded() {
			t.Fatalf("take %d after closing: source %q", i, res[0].Source)
		}
	}
	trip(t, fx, 2, b)
}

// TestHalfOpenLetsOneProbeThrough holds the probe in the primary while 8
// other takes arrive: they are all decided locally, none reaches the store.
func TestHalfOpenLetsOneProbeThrough(t *testing.T) {
	t.Parallel()
	const open = 20 * time.Millisecond
	fx := newFixture(t, fallback.WithFailures(1), fallback.WithOpenInterval(open), fallback.WithTimeout(5*time.Second))
	b := tokenBucket("user:1", 1000, 1000, time.Second, quota.FailLocal)
	trip(t, fx, 1, b)
	fx.f.fail.Store(false)
	gate := make(chan struct{})
	fx.f.gateMu.Lock()
	fx.f.gate = gate
	fx.f.gateMu.Unlock()
	time.Sleep(open + 5*time.Millisecond)
	before := fx.f.calls.Load()
	probeDone := make(chan quota.Result, 1)
	go func() {
		res := make([]quota.Result, 1)
		_, _ = fx.s.Take(context.Background(), []quota.Bucket{b}, res)
		probeDone <- res[0]
	}()
	deadline := time.Now().Add(lateWait)
	for fx.f.calls.Load() == before && time.Now().Before(deadline) {
		time.Sleep(100 * time.Microsecond)
	}
	if fx.f.calls.Load() != before+1 {
		t.Fatal("the probe did not reach the primary")
	}
	for i := 0; i < 8; i++ {
		if _, res := take(t, fx.s, b); res[0].Source != floodgate.SourceLocalFallback {
			t.Fatalf("take %d during the probe: source %q, want local_fallback", i, res[0].Source)
		}
	}
	if got := fx.f.calls.Load(); got != before+1 {
		t.Fatalf("%d calls reached the primary during the probe, want 1", got-before)
	}
	close(gate)
	if r := <-probeDone; r.Source.Degraded() {
		t.Fatalf("probe source %q, want the store", r.Source)
	}
	if st := fx.s.State(); st != gobreaker.StateClosed {
		t.Fatalf("state %s after the probe, want closed", st)
	}
}

// TestTimeoutIsAFailure: a store that has said nothing for the slow grace
// (here since New) and times out is failing: each timeout counts.
func TestTimeoutIsAFailure(t *testing.T) {
	t.Parallel()
	const budget = 3 * time.Millisecond
	fx := newFixture(t, fallback.WithFailures(2), fallback.WithTimeout(budget), fallback.WithOpenInterval(time.Hour))
	b := tokenBucket("user:1", 10, 10, time.Second, quota.FailLocal)
	fx.f.hang.Store(true)
	// Silent for longer than the slow grace since New: down, not busy.
	fx.clk.Advance(fallback.DefaultSlowGrace)
	for i := 0; i < 2; i++ {
		start := time.Now()
		ok, res := take(t, fx.s, b)
		el := time.Since(start)
		if !ok || res[0].Source != floodgate.SourceLocalFallback {
			t.Fatalf("take %d: allowed=%v source %q, want local fallback", i, ok, res[0].Source)
		}
		if el < budget {
			t.Fatalf("take %d returned after %s, before the %s budget", i, el, budget)
		}
	}
	st := fx.s.Stats()
	if st.Timeouts != 2 || st.Failures != 2 || st.State != gobreaker.StateOpen {
		t.Fatalf("stats %+v, want 2 timeouts counted as failures and an open breaker", st)
	}
}

func TestCallerCancellationDoesNotTrip(t *testing.T) {
	t.Parallel()
	fx := newFixture(t, fallback.WithFailures(1), fallback.WithTimeout(5*time.Second))
	b := tokenBucket("user:1", 10, 10, time.Second, quota.FailLocal)
	fx.f.hang.Store(true)
	for i := 0; i < 5; i++ {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Millisecond)
		_, err := fx.s.Take(ctx, []quota.Bucket{b}, make([]quota.Result, 1))
		cancel()
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("take %d: error %v, want the caller's context error", i, err)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := fx.s.Take(ctx, []quota.Bucket{b}, make([]quota.Result, 1)); !errors.Is(err, context.Canceled) {
		t.Fatalf("take with a cancelled context: error %v", err)
	}
	st := fx.s.Stats()
	if st.State != gobreaker.StateClosed || st.Failures != 0 || st.Canceled != 5 {
		t.Fatalf("stats %+v, want closed, no failures, 5 cancelled", st)
	}
}

func TestLRUEvictsLeastRecentlyUsed(t *testing.T) {
	t.Parallel()
	fx := newFixture(t, fallback.WithFailures(1), fallback.WithOpenInterval(time.Hour), fallback.WithLocalCapacity(2))
	a := tokenBucket("a", 1, 1, time.Hour, quota.FailLocal)
	bb := tokenBucket("b", 1, 1, time.Hour, quota.FailLocal)
	c := tokenBucket("c", 1, 1, time.Hour, quota.FailLocal)
	trip(t, fx, 1, a) // a: drained
	if ok, _ := take(t, fx.s, bb); !ok {
		t.Fatal("b denied on first use")
	}
	if ok, _ := take(t, fx.s, a); ok { // a used again: most recent
		t.Fatal("a allowed twice in one instant")
	}
	if ok, _ := take(t, fx.s, c); !ok { // evicts b
		t.Fatal("c denied on first use")
	}
	st := fx.s.Stats()
	if st.LocalBuckets != 2 || st.Evictions != 1 {
		t.Fatalf("LRU: %d buckets, %d evictions, want 2 and 1", st.LocalBuckets, st.Evictions)
	}
	if ok, _ := take(t, fx.s, a); ok {
		t.Fatal("a was evicted instead of b")
	}
	if ok, _ := take(t, fx.s, bb); !ok { // b evicted: starts full again (evicts c)
		t.Fatal("b was not evicted")
	}
}

func TestLocalLimitChangeKeepsConsumption(t *testing.T) {
	t.Parallel()
	fx := newFixture(t, fallback.WithFailures(1), fallback.WithOpenInterval(time.Hour))
	b := tokenBucket("user:1", 10, 10, time.Second, quota.FailLocal)
	trip(t, fx, 1, b)
	for i := 0; i < 9; i++ {
		take(t, fx.s, b)
	}
	// Spent 10 of 10; raised to 20: the 10 more are there at once.
	b.Limit.Burst, b.Limit.Rate = 20, 20
	for i := range 10 {
		ok, res := take(t, fx.s, b)
		if !ok || res[0].Limit != 20 || res[0].Remaining != int64(9-i) {
			t.Fatalf("take %d after raising the limit: allowed=%v %+v, want allowed, limit 20, remaining %d", i+1, ok, res[0], 9-i)
		}
	}
	if ok, res := take(t, fx.s, b); ok || res[0].RetryAfter != 50*time.Millisecond {
		t.Fatalf("take 11 after raising the limit: allowed=%v %+v, want denied, retry 50ms (one unit at 20/s)", ok, res[0])
	}
	// Spent 20; cut to 5: 15 over the new burst, none now, the next unit
	// in 16 units' time at 5/s.
	b.Limit.Burst, b.Limit.Rate = 5, 5
	if ok, res := take(t, fx.s, b); ok || res[0].Limit != 5 || res[0].RetryAfter != 3200*time.Millisecond {
		t.Fatalf("after cutting the limit: allowed=%v %+v, want denied, limit 5, retry 3.2s", ok, res[0])
	}
}

type ctxKey struct{}

// ctxProbe is a primary that reports what its context looks like, then
// waits for Done when told to.
type ctxProbe struct {
	wait  bool
	delay time.Duration // with wait: answer after delay unless the context ends first
	value any
	// before and after bracket the first read of the context (Deadline),
	// which starts the call's budget; deadline is what it returned.
	before, after, deadline time.Time
	waited                  time.Duration // from before until Done closed
	err                     error
}

func (p *ctxProbe) Take(ctx context.Context, b []quota.Bucket, r []quota.Result) (bool, error) {
	p.value = ctx.Value(ctxKey{})
	p.before = time.Now()
	d, ok := ctx.Deadline()
	p.after = time.Now()
	if !ok {
		return false, errors.New("no deadline")
	}
	p.deadline = d
	if p.wait {
		start := p.before
		if p.delay > 0 {
			select {
			case <-time.After(p.delay):
				for i := range b {
					r[i] = quota.Result{Allowed: true}
				}
				return true, nil
			case <-ctx.Done():
			}
		} else {
			<-ctx.Done()
		}
		p.waited = time.Since(start)
		p.err = ctx.Err()
		return false, ctx.Err()
	}
	if err := ctx.Err(); err != nil {
		return false, err
	}
	for i := range b {
		r[i] = quota.Result{Allowed: true}
	}
	return true, nil
}

// TestCallContext: the context a call to the primary gets carries the
// caller's values, and its deadline is the budget from the call's first
// read of it (exactly: between the reads that bracket it), or the
// caller's own deadline when that is earlier, which then is the caller's
// error; Done closes and Err reports at the deadline, not before, and
// the take falls back. The slow grace runs on a fake clock that does not
// move: the timeouts, just after the store answered, are slow calls.
func TestCallContext(t *testing.T) {
	t.Parallel()
	const budget = 30 * time.Millisecond
	p := &ctxProbe{}
	s, err := fallback.New(p, fallback.WithTimeout(budget), fallback.WithClock(clock.New(time.Time{})),
		fallback.WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		t.Fatal(err)
	}
	b := []quota.Bucket{tokenBucket("k", 10, 10, time.Second, quota.FailOpen)}
	res := make([]quota.Result, 1)
	ctx := context.WithValue(context.Background(), ctxKey{}, "v")

	// The caller's values pass; the deadline is the budget.
	for i := 0; i < 3; i++ { // reused contexts behave the same
		if ok, err := s.Take(ctx, b, res); !ok || err != nil {
			t.Fatalf("take %d: %v %v", i, ok, err)
		}
		if p.value != "v" || p.deadline.Before(p.before.Add(budget)) || p.deadline.After(p.after.Add(budget)) {
			t.Fatalf("take %d: value %v, deadline %s after the call's start, want the caller's value and the budget %s",
				i, p.value, p.deadline.Sub(p.before), budget)
		}
	}
	// A caller's earlier deadline wins, and running out of it is the
	// caller's error, not a store failure.
	p.wait = true
	early, cancel := context.WithTimeout(ctx, 5*time.Millisecond)
	_, err = s.Take(early, b, res)
	cancel()
	if want, _ := early.Deadline(); !errors.Is(err, context.DeadlineExceeded) || !p.deadline.Equal(want) {
		t.Fatalf("early caller deadline: err %v, deadline %s, want the caller's %s", err, p.deadline, want)
	}
	if st := s.Stats(); st.Failures != 0 || st.Canceled != 1 {
		t.Fatalf("stats %+v, want the caller's deadline counted as cancelled", st)
	}
	// Done closes at the budget and Err says so; the call then falls back.
	for i := 0; i < 2; i++ { // a fresh context after one expired
		ok, err := s.Take(ctx, b, res)
		if err != nil || !ok || res[0].Source != floodgate.SourceFailOpen {
			t.Fatalf("timed-out take %d: allowed=%v err=%v source %q", i, ok, err, res[0].Source)
		}
		if p.waited < budget || !errors.Is(p.err, context.DeadlineExceeded) {
			t.Fatalf("timed-out take %d: Done after %s with %v, want at the budget %s and DeadlineExceeded", i, p.waited, p.err, budget)
		}
	}
	// The store answered the three takes just before: these timeouts are
	// slow calls, not failures (WithSlowGrace).
	if st := s.Stats(); st.Timeouts != 0 || st.Failures != 0 || st.Slow != 2 || st.Causes[fallback.CauseTimeout] != 2 {
		t.Fatalf("stats %+v, want 2 slow calls and no failures", st)
	}
}

// TestSlowCallsDoNotTrip: a store that keeps answering but is sometimes
// slower than the budget never opens the breaker, and a fail-closed rule
// waits the longer closed budget instead of denying; once the store has
// answered nothing for the grace, timeouts count and open it. The grace
// runs on a fake clock; the closed budget (a minute) is one no loaded
// machine stretches a 50ms answer to, while the call budget (10ms) is
// always shorter than it.
func TestSlowCallsDoNotTrip(t *testing.T) {
	t.Parallel()
	const budget, grace = 10 * time.Millisecond, 150 * time.Millisecond
	clk := clock.New(time.Time{})
	p := &ctxProbe{}
	s, err := fallback.New(p, fallback.WithTimeout(budget), fallback.WithClosedTimeout(time.Minute), fallback.WithClock(clk),
		fallback.WithSlowGrace(grace), fallback.WithFailures(2), fallback.WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		t.Fatal(err)
	}
	open := []quota.Bucket{tokenBucket("k", 10, 10, time.Second, quota.FailOpen)}
	closed := []quota.Bucket{tokenBucket("login", 10, 10, time.Second, quota.FailClosed)}
	res := make([]quota.Result, 1)
	ctx := context.Background()
	for i := 0; i < 10; i++ {
		p.wait = i%2 == 1 // every other call is slower than the budget
		if ok, err := s.Take(ctx, open, res); err != nil || !ok {
			t.Fatalf("take %d: %v %v", i, ok, err)
		}
	}
	if st := s.Stats(); st.State != gobreaker.StateClosed || st.Failures != 0 || st.Slow != 5 {
		t.Fatalf("stats %+v: want closed, 5 slow calls, no failures", st)
	}
	// A closed rule gets the closed budget: a call of 50ms is answered by
	// the store, not denied.
	p.wait, p.delay = true, 50*time.Millisecond
	ok, err := s.Take(ctx, closed, res)
	p.delay = 0
	if err != nil || !ok || res[0].Source == floodgate.SourceFailClosed {
		t.Fatalf("closed rule on a slow store: %v %v %+v, want the store's answer", ok, err, res[0])
	}
	// Silence longer than the grace is an outage.
	p.wait = true
	clk.Advance(grace)
	for i := 0; i < 2; i++ {
		_, _ = s.Take(ctx, open, res)
	}
	if st := s.Stats(); st.State != gobreaker.StateOpen || st.Failures != 2 {
		t.Fatalf("stats %+v: want the breaker open after 2 timeouts past the grace", st)
	}
}

// TestConcurrentFailuresRace drives the healthy fast path and the breaker
// from many goroutines while the primary flips between failing and
// healthy, for the race detector; at the end a healthy primary closes the
// breaker and a run of failures opens it after exactly the threshold.
func TestConcurrentFailuresRace(t *testing.T) {
	t.Parallel()
	fx := newFixture(t, fallback.WithFailures(3), fallback.WithOpenInterval(2*time.Millisecond))
	b := tokenBucket("k", 1_000_000, 1_000_000, time.Second, quota.FailLocal)
	var wg sync.WaitGroup
	for w := 0; w < 8; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			res := make([]quota.Result, 1)
			for i := 0; i < 500; i++ {
				if w == 0 && i%50 == 0 {
					fx.f.fail.Store(i%100 == 0)
				}
				if _, err := fx.s.Take(context.Background(), []quota.Bucket{b}, res); err != nil {
					t.Errorf("take: %v", err)
					return
				}
			}
		}(w)
	}
	wg.Wait()
	fx.f.fail.Store(false)
	if !waitFor(lateWait, func() bool {
		take(t, fx.s, b)
		return fx.s.State() == gobreaker.StateClosed
	}) {
		t.Fatalf("breaker %s with a healthy primary", fx.s.State())
	}
	take(t, fx.s, b)
	trip(t, fx, 3, b)
}

// TestLocalStartsFromWhatTheStoreSaid: a local limiter created when the
// store stops answering starts from the remaining units of the store's
// last answer for that key, refilled since and divided among the live
// instances, not from a fresh full share; a key the store never answered
// for starts full; a change in the instance count reshapes the share.
func TestLocalStartsFromWhatTheStoreSaid(t *testing.T) {
	t.Parallel()
	instances := 2
	fx := newFixture(t, fallback.WithFailures(1), fallback.WithOpenInterval(50*time.Millisecond),
		fallback.WithInstances(func() int { return instances }))
	b := tokenBucket("tenant:acme", 1, 100, time.Second, quota.FailLocal) // 1 unit/s: no refill to speak of
	for i := 0; i < 90; i++ {
		if ok, _ := take(t, fx.s, b); !ok {
			t.Fatalf("store denied take %d", i)
		}
	}
	fx.f.fail.Store(true)
	// 10 left in the store, 2 instances: this one's share is 5.
	n := 0
	for ; n < 100; n++ {
		ok, res := take(t, fx.s, b)
		if !ok {
			break
		}
		if res[0].Source != floodgate.SourceLocalFallback {
			t.Fatalf("take %d decided by %s", n, res[0].Source)
		}
	}
	if n != 5 {
		t.Fatalf("local limiter admitted %d after the store said 10 were left, want 5 (10 / 2 instances)", n)
	}
	// A key the store never answered for: a full share, 100 / 2.
	fresh := tokenBucket("tenant:new", 1, 100, time.Second, quota.FailLocal)
	n = 0
	for ; n < 100; n++ {
		if ok, _ := take(t, fx.s, fresh); !ok {
			break
		}
	}
	if n != 50 {
		t.Fatalf("a key never seen admitted %d, want a full share of 50", n)
	}
	// Four instances now: the share's burst and rate follow.
	instances = 4
	fx.clk.Advance(time.Hour)
	n = 0
	for ; n < 100; n++ {
		if ok, _ := take(t, fx.s, fresh); !ok {
			break
		}
	}
	if n != 25 {
		t.Fatalf("after the fleet grew to 4 admitted %d, want 25", n)
	}
	// The store comes back and answers for acme again; the existing local
	// limiter, refilled while idle, starts from the store's word at the
	// next outage: 10 left, 4 instances: 2.
	fx.f.fail.Store(false)
	time.Sleep(60 * time.Millisecond) // past the open interval: the next take probes and closes the breaker
	for i := 0; i < 90; i++ {         // the store's bucket refilled to 100 in the hour
		if ok, res := take(t, fx.s, b); !ok || res[0].Source.Degraded() {
			t.Fatalf("store take %d: %v %+v", i, ok, res[0])
		}
	}
	fx.f.fail.Store(true)
	n = 0
	for ; n < 100; n++ {
		if ok, _ := take(t, fx.s, b); !ok {
			break
		}
	}
	if n != 2 {
		t.Fatalf("a refilled local limiter admitted %d after the store said 10 were left to 4 instances, want 2", n)
	}
}

// TestFirstTimeoutsAreSlow: a store not heard from yet whose first calls
// run out of their budget (a process dialing a busy Redis) is slow, not
// failing, until the slow grace since New has passed.
func TestFirstTimeoutsAreSlow(t *testing.T) {
	t.Parallel()
	fx := newFixture(t, fallback.WithFailures(2), fallback.WithTimeout(2*time.Millisecond), fallback.WithOpenInterval(time.Hour))
	b := tokenBucket("user:1", 10, 10, time.Second, quota.FailLocal)
	fx.f.hang.Store(true)
	for range 3 {
		take(t, fx.s, b)
	}
	if st := fx.s.Stats(); st.Slow != 3 || st.Failures != 0 || st.State != gobreaker.StateClosed {
		t.Fatalf("stats %+v: want 3 slow calls, no failure, closed", st)
	}
	fx.clk.Advance(fallback.DefaultSlowGrace)
	for range 2 {
		take(t, fx.s, b)
	}
	if st := fx.s.Stats(); st.Failures != 2 || st.State != gobreaker.StateOpen {
		t.Fatalf("stats %+v: want 2 failures and an open breaker after the grace", st)
	}
}

// TestProbeWaitsTheClosedBudget: after an outage the store comes back slow
// (20ms, four times the call budget): the half-open probe waits the closed
// budget, succeeds and closes the breaker, instead of timing out and
// holding it open interval after interval. The closed budget (a minute)
// is one no loaded machine stretches a 20ms answer to; the call budget
// (5ms) is always shorter than it.
func TestProbeWaitsTheClosedBudget(t *testing.T) {
	t.Parallel()
	const open = 100 * time.Millisecond
	p := &comesBackSlow{}
	p.down.Store(true)
	s, err := fallback.New(p, fallback.WithTimeout(5*time.Millisecond), fallback.WithClosedTimeout(time.Minute),
		fallback.WithFailures(2), fallback.WithOpenInterval(open), fallback.WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		t.Fatal(err)
	}
	b := []quota.Bucket{tokenBucket("k", 10, 10, time.Second, quota.FailOpen)}
	res := make([]quota.Result, 1)
	ctx := context.Background()
	for range 2 {
		_, _ = s.Take(ctx, b, res)
	}
	if st := s.State(); st != gobreaker.StateOpen {
		t.Fatalf("state %s after 2 refused calls, want open", st)
	}
	p.down.Store(false) // back, but every call takes 20ms
	time.Sleep(open + 10*time.Millisecond)
	if _, err := s.Take(ctx, b, res); err != nil { // the probe
		t.Fatal(err)
	}
	if res[0].Source.Degraded() {
		t.Fatalf("probe: source %q, want the store's answer within the closed budget", res[0].Source)
	}
	if st := s.State(); st != gobreaker.StateClosed {
		t.Fatalf("state %s after a slow but successful probe, want closed", st)
	}
}

// comesBackSlow refuses every call while down, then answers each after
// 20ms unless the call's context ends first.
type comesBackSlow struct{ down atomic.Bool }

func (c *comesBackSlow) Take(ctx context.Context, b []quota.Bucket, r []quota.Result) (bool, error) {
	if c.down.Load() {
		return false, syscall.ECONNREFUSED
	}
	select {
	case <-time.After(20 * time.Millisecond):
	case <-ctx.Done():
		return false, ctx.Err()
	}
	for i := range b {
		r[i] = quota.Result{Allowed: true, Limit: 10, Remaining: 9}
	}
	return true, nil
}
