package fleet_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/floodgate-go/floodgate/fleet"
	"github.com/floodgate-go/floodgate/testing/clock"
	"github.com/floodgate-go/floodgate/testing/redistest"
)

const (
	interval = time.Second
	ttl      = 5 * time.Second
)

func init() {
	// go-redis logs every failed dial; the outage tests make many.
	redis.SetLogger(quietLogger{})
}

type quietLogger struct{}

func (quietLogger) Printf(context.Context, string, ...any) {}

func ctxT(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// callTimeout bounds each Redis call of a beat in these tests: one no
// healthy call comes near on a loaded machine (a call under load takes
// tens of milliseconds), so that only a fault the test makes fails a beat.
const callTimeout = 10 * time.Second

// newClient returns a client of its own to s, as one instance of a service
// would have, set up as package fallback advises: context deadlines
// honoured, and a dead server failing a call at once rather than after
// redials.
func newClient(t *testing.T, s *redistest.Server) *redis.Client {
	t.Helper()
	c := redis.NewClient(&redis.Options{
		Addr:                  s.Addr(),
		DialTimeout:           time.Second,
		ReadTimeout:           callTimeout,
		WriteTimeout:          callTimeout,
		MaxRetries:            1,
		DialerRetries:         1,
		ContextTimeoutEnabled: true,
	})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// member returns a Members named id on its own client to s, on fake time.
func member(t *testing.T, s *redistest.Server, clk *clock.Fake, id string, opts ...fleet.Option) *fleet.Members {
	t.Helper()
	opts = append([]fleet.Option{fleet.WithInstanceID(id), fleet.WithHeartbeat(interval, ttl), fleet.WithClock(clk),
		fleet.WithTimeout(callTimeout)}, opts...)
	m, err := fleet.New(newClient(t, s), opts...)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// beat beats each member in turn and checks the count each one reads.
func beat(t *testing.T, want []int, ms ...*fleet.Members) {
	t.Helper()
	ctx := ctxT(t)
	for i, m := range ms {
		if err := m.Beat(ctx); err != nil {
			t.Fatalf("beat of %s: %v", m.ID(), err)
		}
		if got := m.Count(); got != want[i] {
			t.Fatalf("%s counts %d after its beat, want %d", m.ID(), got, want[i])
		}
		if m.Stale() {
			t.Fatalf("%s is stale right after a successful beat", m.ID())
		}
	}
}

// three starts a Redis with members a, b and c on one fake clock, all
// beaten once so that each counts 3.
func three(t *testing.T) (*redistest.Server, *clock.Fake, *fleet.Members, *fleet.Members, *fleet.Members) {
	t.Helper()
	s := redistest.Start(t)
	clk := clock.New(time.Time{})
	a, b, c := member(t, s, clk, "a"), member(t, s, clk, "b"), member(t, s, clk, "c")
	for _, m := range []*fleet.Members{a, b, c} {
		if m.Count() != 1 || !m.Stale() {
			t.Fatalf("%s before its first beat: Count %d Stale %v, want 1 true", m.ID(), m.Count(), m.Stale())
		}
	}
	beat(t, []int{1, 2, 3}, a, b, c)
	beat(t, []int{3, 3, 3}, a, b, c)
	return s, clk, a, b, c
}

func TestThreeMembersCountThree(t *testing.T) {
	t.Parallel()
	s, clk, a, _, _ := three(t)
	// The set holds each member with its expiry, now + TTL, and the key
	// itself expires a TTL after the last beat.
	ctx := ctxT(t)
	got, err := s.Client().ZRangeWithScores(ctx, a.Key(), 0, -1).Result()
	if err != nil {
		t.Fatal(err)
	}
	want := float64(clk.Now().Add(ttl).UnixMilli())
	if len(got) != 3 || got[0].Score != want || got[1].Score != want || got[2].Score != want {
		t.Fatalf("member set = %v, want a, b, c with expiry %v", got, want)
	}
	if pttl, err := s.Client().PTTL(ctx, a.Key()).Result(); err != nil || pttl <= 0 || pttl > ttl {
		t.Fatalf("PTTL of the set = %s, %v; want in (0, %s]", pttl, err, ttl)
	}
}

func TestLeave(t *testing.T) {
	t.Parallel()
	s, _, a, b, c := three(t)
	ctx := ctxT(t)
	if err := c.Leave(ctx); err != nil {
		t.Fatal(err)
	}
	if n, _ := s.Client().ZCard(ctx, c.Key()).Result(); n != 2 {
		t.Fatalf("%d members after c left, want 2", n)
	}
	if c.Count() != 3 || c.Stale() {
		t.Fatalf("Leave changed c: Count %d Stale %v, want 3 false", c.Count(), c.Stale())
	}
	beat(t, []int{2, 2}, a, b)
	// A beat after Leave joins again; a rejoining beat never lowers the
	// count (here it is exact anyway).
	beat(t, []int{3, 3, 3}, c, a, b)
}

// An instance that stops beating is live until exactly a TTL after its
// last beat.
func TestStoppedMemberExpiresAfterTTL(t *testing.T) {
	t.Parallel()
	_, clk, a, b, c := three(t)
	clk.Advance(ttl - time.Millisecond)
	beat(t, []int{3, 3}, a, b)
	if c.Stale() {
		t.Fatal("c stale 1ms before a TTL since its last beat")
	}
	clk.Advance(time.Millisecond)
	beat(t, []int{2, 2}, a, b)
	if !c.Stale() || c.Count() != 3 {
		t.Fatalf("c a TTL after its last beat: Stale %v Count %d, want true 3", c.Stale(), c.Count())
	}
	// c comes back: its entry had expired, so its beat counts as a rejoin.
	beat(t, []int{3, 3, 3}, c, a, b)
}

// Redis killed: Count keeps the last value, Stale turns true a TTL after
// the last successful beat, failures are counted. Redis restarted empty:
// the first beats keep the count (the others have not re-registered yet),
// then the count is exact again.
func TestRedisOutage(t *testing.T) {
	t.Parallel()
	s, clk, a, b, c := three(t)
	ctx := ctxT(t)
	s.Kill()

	clk.Advance(interval)
	for _, m := range []*fleet.Members{a, b, c} {
		err := m.Beat(ctx)
		if err == nil || !strings.HasPrefix(err.Error(), `fleet: beat of instance "`+m.ID()+`" on key "fg:fleet:{members}": `) {
			t.Fatalf("beat of %s with Redis down: %v", m.ID(), err)
		}
		if m.Count() != 3 || m.Stale() || m.Errors() != 1 {
			t.Fatalf("%s after a failed beat: Count %d Stale %v Errors %d, want 3 false 1", m.ID(), m.Count(), m.Stale(), m.Errors())
		}
	}
	if err := c.Leave(ctx); err == nil || c.Errors() != 2 {
		t.Fatalf("leave with Redis down: %v, Errors %d; want an error and 2", err, c.Errors())
	}

	clk.Advance(ttl - interval - time.Millisecond)
	if a.Stale() {
		t.Fatal("stale 1ms before a TTL since the last successful beat")
	}
	clk.Advance(time.Millisecond)
	if err := a.Beat(ctx); err == nil {
		t.Fatal("beat succeeded with Redis down")
	}
	for _, m := range []*fleet.Members{a, b, c} {
		if !m.Stale() || m.Count() != 3 {
			t.Fatalf("%s a TTL into the outage: Stale %v Count %d, want true 3", m.ID(), m.Stale(), m.Count())
		}
	}

	// Redis comes back empty; c never comes back.
	s.Restart()
	clk.Advance(interval)
	beat(t, []int{3, 3}, a, b) // rejoining beats keep the last count
	beat(t, []int{2, 2}, a, b) // then exact
	if a.Errors() != 2 || b.Errors() != 1 {
		t.Fatalf("Errors: a %d b %d, want 2 1", a.Errors(), b.Errors())
	}
}

// A beat against a Redis that does not answer gives up after the timeout
// (the client honours context deadlines: ContextTimeoutEnabled), not the
// client's read timeout (callTimeout, 10s) nor the caller's context
// (20s): it returns within 5s, fifty times its 100ms, which a loaded
// machine does not stretch it to.
func TestPausedRedisBeatIsBounded(t *testing.T) {
	t.Parallel()
	s := redistest.Start(t)
	clk := clock.New(time.Time{})
	a := member(t, s, clk, "a", fleet.WithTimeout(100*time.Millisecond))
	beat(t, []int{1}, a)
	ctx := ctxT(t)
	s.Pause()
	beaten := make(chan error, 1)
	go func() { beaten <- a.Beat(ctx) }()
	var err error
	select {
	case err = <-beaten:
	case <-time.After(5 * time.Second):
		s.Resume()
		t.Fatal("a beat against a paused Redis still waits 5s on: its 100ms timeout was not applied")
	}
	s.Resume()
	if err == nil || !errors.Is(err, context.DeadlineExceeded) && !strings.Contains(err.Error(), "timeout") {
		t.Fatalf("beat against a paused Redis: %v, want a timeout", err)
	}
	if a.Count() != 1 || a.Errors() != 1 {
		t.Fatalf("after the timeout: Count %d Errors %d, want 1 1", a.Count(), a.Errors())
	}
	b := member(t, s, clk, "b")
	beat(t, []int{2}, b)
	beat(t, []int{2}, a)
}

// A beat cut short by its caller's context is not a Redis failure.
func TestCancelledBeatIsNotCounted(t *testing.T) {
	t.Parallel()
	s := redistest.Start(t)
	a := member(t, s, clock.New(time.Time{}), "a")
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := a.Beat(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("beat with a cancelled context: %v", err)
	}
	if err := a.Leave(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("leave with a cancelled context: %v", err)
	}
	if a.Errors() != 0 || a.Count() != 1 {
		t.Fatalf("Errors %d Count %d, want 0 1", a.Errors(), a.Count())
	}
}

// Without WithClock the script reads Redis TIME.
func TestRedisTime(t *testing.T) {
	t.Parallel()
	s := redistest.Start(t)
	m, err := fleet.New(newClient(t, s), fleet.WithInstanceID("a"), fleet.WithTimeout(callTimeout))
	if err != nil {
		t.Fatal(err)
	}
	before := time.Now()
	beat(t, []int{1}, m)
	after := time.Now()
	score, err := s.Client().ZScore(ctxT(t), m.Key(), "a").Result()
	if err != nil {
		t.Fatal(err)
	}
	if lo, hi := before.Add(fleet.DefaultTTL).UnixMilli()-1, after.Add(fleet.DefaultTTL).UnixMilli()+1; int64(score) < lo || int64(score) > hi {
		t.Fatalf("expiry %v, want within [%d, %d]", score, lo, hi)
	}
}

// counting is a go-redis hook that counts dials and commands.
type counting struct{ n atomic.Int64 }

func (c *counting) DialHook(next redis.DialHook) redis.DialHook {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		c.n.Add(1)
		return next(ctx, network, addr)
	}
}

func (c *counting) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		c.n.Add(1)
		return next(ctx, cmd)
	}
}

func (c *counting) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		c.n.Add(1)
		return next(ctx, cmds)
	}
}

func TestStaticNeverTouchesRedis(t *testing.T) {
	t.Parallel()
	s := redistest.Start(t)
	client := redis.NewClient(&redis.Options{Addr: s.Addr()})
	t.Cleanup(func() { _ = client.Close() })
	hook := &counting{}
	client.AddHook(hook)

	m, err := fleet.New(client, fleet.WithStatic(7), fleet.WithHeartbeat(time.Millisecond, time.Second))
	if err != nil {
		t.Fatal(err)
	}
	ctx := ctxT(t)
	if err := m.Beat(ctx); err != nil {
		t.Fatal(err)
	}
	if err := m.Leave(ctx); err != nil {
		t.Fatal(err)
	}
	runCtx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	if err := m.Run(runCtx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Run = %v, want its context's error", err)
	}
	if m.Count() != 7 || m.Stale() || m.Errors() != 0 {
		t.Fatalf("static: Count %d Stale %v Errors %d, want 7 false 0", m.Count(), m.Stale(), m.Errors())
	}
	if n := hook.n.Load(); n != 0 {
		t.Fatalf("%d dials or commands sent with WithStatic, want 0", n)
	}
	if n, err := s.Client().DBSize(ctx).Result(); err != nil || n != 0 {
		t.Fatalf("DBSIZE = %d, %v; want 0", n, err)
	}

	// No client is needed at all.
	m, err = fleet.New(nil, fleet.WithStatic(3))
	if err != nil {
		t.Fatal(err)
	}
	if m.Count() != 3 || m.Beat(ctx) != nil || m.Leave(ctx) != nil {
		t.Fatalf("static without a client: Count %d", m.Count())
	}
}

// Run beats at once and every interval, on Redis TIME, until its context
// ends; then it leaves. Count is read concurrently all along.
func TestRunBeatsAndLeaves(t *testing.T) {
	t.Parallel()
	s := redistest.Start(t)
	ctx := ctxT(t)
	r, err := fleet.New(newClient(t, s), fleet.WithInstanceID("run"), fleet.WithHeartbeat(10*time.Millisecond, 2*time.Second),
		fleet.WithTimeout(callTimeout))
	if err != nil {
		t.Fatal(err)
	}
	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	done := make(chan error, 1)
	go func() { done <- r.Run(runCtx) }()

	waitFor(t, "Run's first beat", func() bool { return !r.Stale() })
	if err := r.Run(ctx); err == nil || err.Error() != "fleet: Run is already running for this Members" {
		t.Fatalf("second Run = %v", err)
	}
	o, err := fleet.New(newClient(t, s), fleet.WithInstanceID("other"))
	if err != nil {
		t.Fatal(err)
	}
	beat(t, []int{2}, o)
	waitFor(t, "Run to count 2", func() bool { return r.Count() == 2 })

	stop()
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("Run = %v, want context.Canceled", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Run did not return within 5s of its context ending")
	}
	if _, err := s.Client().ZScore(ctx, r.Key(), "run").Result(); !errors.Is(err, redis.Nil) {
		t.Fatalf("ZSCORE of the stopped instance: %v, want redis.Nil (it left)", err)
	}
	beat(t, []int{1}, o)
	if r.Errors() != 0 {
		t.Fatalf("Run counted %d errors on a healthy Redis", r.Errors())
	}
}

// lockedBuffer collects log output written by Run's goroutine.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) count(s string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Count(l.b.String(), s)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// Run's failures are counted, logged at most once per 10s of the Clock,
// and never stop it; recovery is logged once.
func TestRunLogsFailuresThrottled(t *testing.T) {
	t.Parallel()
	s := redistest.Start(t)
	s.Kill()
	clk := clock.New(time.Time{})
	var logs lockedBuffer
	m, err := fleet.New(newClient(t, s), fleet.WithInstanceID("a"), fleet.WithHeartbeat(5*time.Millisecond, time.Second),
		fleet.WithTimeout(callTimeout), fleet.WithClock(clk), fleet.WithLogger(slog.New(slog.NewTextHandler(&logs, nil))))
	if err != nil {
		t.Fatal(err)
	}
	ctx, stop := context.WithCancel(ctxT(t))
	defer stop()
	done := make(chan error, 1)
	go func() { done <- m.Run(ctx) }()

	waitFor(t, "5 failed beats", func() bool { return m.Errors() >= 5 })
	if n := logs.count("heartbeat failed"); n != 1 {
		t.Fatalf("%d warnings after %d failures within 10s, want 1:\n%s", n, m.Errors(), logs.String())
	}
	clk.Advance(10 * time.Second)
	before := m.Errors()
	waitFor(t, "more failed beats", func() bool { return m.Errors() >= before+2 })
	if n := logs.count("heartbeat failed"); n != 2 {
		t.Fatalf("%d warnings after 10s more of failures, want 2:\n%s", n, logs.String())
	}

	s.Restart()
	waitFor(t, "recovery", func() bool { return logs.count("heartbeats recovered") == 1 })
	if m.Count() != 1 || m.Stale() {
		t.Fatalf("after recovery: Count %d Stale %v, want 1 false", m.Count(), m.Stale())
	}
	stop()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("Run = %v", err)
	}
	if n := logs.count("leave failed"); n != 0 {
		t.Fatalf("leave failed on a healthy Redis:\n%s", logs.String())
	}
}

// On Redis Cluster the set is one key in one slot; members on different
// cluster clients count each other.
func TestCluster(t *testing.T) {
	wait := redistest.StartClusterAsync(t) // forms while the tests before this one run
	t.Parallel()
	cl := wait()
	clk := clock.New(time.Time{})
	var ms []*fleet.Members
	for _, id := range []string{"a", "b", "c"} {
		m, err := fleet.New(cl.Client(), fleet.WithInstanceID(id), fleet.WithClock(clk), fleet.WithKey("svc:{checkout}:fleet"),
			fleet.WithTimeout(callTimeout))
		if err != nil {
			t.Fatal(err)
		}
		ms = append(ms, m)
	}
	beat(t, []int{1, 2, 3}, ms...)
	if err := ms[0].Leave(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	beat(t, []int{2, 2}, ms[1:]...)
}

// waitFor polls cond every 2ms for up to 10s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(2 * time.Millisecond)
	}
}
