package fallback_test

import (
	"context"
	"errors"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/fallback"
	"github.com/floodgate-go/floodgate/quota"
	"github.com/floodgate-go/floodgate/testing/clock"
	"github.com/floodgate-go/floodgate/testing/redistest"
	"github.com/floodgate-go/floodgate/tiers/localfirst"
	"github.com/floodgate-go/floodgate/tiers/redisstore"
)

// TestCloseHandsOver: units admitted locally while Redis stalls are
// charged to Redis by Close once it answers again, exactly: the bucket
// holds 100 units and refills 1 an hour on a fake clock that does not
// move, 10 are taken through Redis, 45 locally (90 left, 2 instances),
// and Redis holds 100 − 10 − 45 after Close. Close leaves the Redis
// store open (it belongs to the caller), a second Close returns nil, and
// a Take after Close is still decided by Redis. The stall is the
// ledger's; the call budget is one no healthy call to Redis comes near on
// a loaded machine (healthyBudget).
func TestCloseHandsOver(t *testing.T) {
	t.Parallel()
	clk := clock.New(time.Unix(1_700_000_000, 0))
	srv := redistest.Start(t)
	rs, err := redisstore.New(srv.Client(), redisstore.WithClock(clk))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = rs.Close() })
	led := &stalling{inner: rs}
	s, err := fallback.New(led, fallback.WithClock(clk), fallback.WithInstances(func() int { return 2 }), fallback.WithTimeout(healthyBudget),
		fallback.WithLogger(slog.New(slog.NewTextHandler(testWriter{t}, nil))))
	if err != nil {
		t.Fatal(err)
	}
	b := tokenBucket("close:handover", 1, 100, time.Hour, quota.FailLocal)
	takeFromStore(t, s, b, 10)
	led.stall.Store(true)
	if n := takeLocally(t, s, b, 200); n != 45 {
		t.Fatalf("admitted %d locally, want 45 (90 left / 2 instances)", n)
	}
	led.stall.Store(false)
	if got := remaining(t, rs, b); got != 90 {
		t.Fatalf("Redis holds %d before Close, want 90", got)
	}
	if st := s.Stats(); st.Owed != 45 {
		t.Fatalf("owed %d before Close, want 45", st.Owed)
	}
	ctx, cancel := context.WithTimeout(context.Background(), lateWait)
	defer cancel()
	if err := s.Close(ctx); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if got := remaining(t, rs, b); got != 45 {
		t.Fatalf("Redis holds %d after Close, want 45 (100 - 10 taken - 45 admitted locally)", got)
	}
	if st := s.Stats(); st.Owed != 0 || st.Charged != 45 {
		t.Fatalf("after Close: owed %d, charged %d; want 0, 45", st.Owed, st.Charged)
	}
	if err := s.Close(ctx); err != nil {
		t.Fatalf("second Close: %v, want nil", err)
	}
	if ok, res := take(t, s, b); !ok || res[0].Source.Degraded() || res[0].Remaining != 44 {
		t.Fatalf("Take after Close: %v %+v; want allowed by Redis with 44 remaining", ok, res[0])
	}
}

// TestCloseStopsBackgroundWork: before Close, a Take the primary answers
// while units are owed starts a background Sync, which charges them;
// after Close, the same Take starts none (Background reads idle at once,
// and the units are still owed, so no Sync ran either), Take still
// decides locally while the primary stalls, and Sync by hand still
// charges what is owed.
func TestCloseStopsBackgroundWork(t *testing.T) {
	t.Parallel()
	clk := clock.New(time.Unix(1_700_000_000, 0))
	s, mem, led := stalledRig(t, clk)
	ctx := context.Background()

	// Before Close: the background Sync charges the owed units.
	a := tokenBucket("close:bg:a", 1, 100, time.Hour, quota.FailLocal)
	takeFromStore(t, s, a, 10)
	led.stall.Store(true)
	if n := takeLocally(t, s, a, 200); n != 45 {
		t.Fatalf("admitted %d locally, want 45", n)
	}
	led.stall.Store(false)
	if ok, res := take(t, s, a); !ok || res[0].Source.Degraded() {
		t.Fatalf("store take after the stall: %v %+v", ok, res[0])
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		syncing, _ := s.Background()
		if s.Stats().Owed == 0 && !syncing {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the background Sync did not charge the owed units in 10s: %+v", s.Stats())
		}
		time.Sleep(time.Millisecond)
	}
	if got := remaining(t, mem, a); got != 44 {
		t.Fatalf("the store holds %d, want 44 (100 - 10 - 45 local - 1)", got)
	}

	if err := s.Close(ctx); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if syncing, late := s.Background(); syncing || late != 0 {
		t.Fatalf("after Close: background Sync running %v, %d late calls; want none", syncing, late)
	}

	// After Close: Take still decides, locally while the primary
	// stalls; nothing runs in the background.
	b := tokenBucket("close:bg:b", 1, 100, time.Hour, quota.FailLocal)
	led.stall.Store(true)
	if n := takeLocally(t, s, b, 200); n != 50 {
		t.Fatalf("admitted %d locally after Close, want 50 (a fresh key's share, 100 / 2)", n)
	}
	led.stall.Store(false)
	if ok, res := take(t, s, b); !ok || res[0].Source.Degraded() {
		t.Fatalf("store take after Close: %v %+v", ok, res[0])
	}
	if syncing, late := s.Background(); syncing || late != 0 {
		t.Fatalf("a Take after Close started background work: Sync running %v, %d late calls", syncing, late)
	}
	if st := s.Stats(); st.Owed != 50 {
		t.Fatalf("owed %d after a Take after Close, want 50: a background Sync ran", st.Owed)
	}
	if err := s.Sync(ctx); err != nil {
		t.Fatalf("Sync after Close: %v", err)
	}
	if got := remaining(t, mem, b); got != 49 {
		t.Fatalf("the store holds %d after Sync, want 49 (100 - 1 - 50 local)", got)
	}
}

// TestCloseRespectsContext: Close with a context already ended sends
// nothing and returns at once with an error naming what it did not hand
// over and why; what is owed stays owed, and Sync hands it over later.
func TestCloseRespectsContext(t *testing.T) {
	t.Parallel()
	clk := clock.New(time.Unix(1_700_000_000, 0))
	s, mem, led := stalledRig(t, clk)
	b := tokenBucket("close:ctx", 1, 100, time.Hour, quota.FailLocal)
	led.stall.Store(true)
	if n := takeLocally(t, s, b, 200); n != 50 {
		t.Fatalf("admitted %d locally, want 50", n)
	}
	led.stall.Store(false)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	err := s.Close(ctx)
	if err == nil || !errors.Is(err, context.Canceled) {
		t.Fatalf("Close with an ended context: %v, want an error wrapping context.Canceled", err)
	}
	if want := "fallback: Close: 50 units owed over 1 keys not handed over to the primary: context canceled"; err.Error() != want {
		t.Fatalf("Close: %q, want %q", err, want)
	}
	if got := remaining(t, mem, b); got != 100 {
		t.Fatalf("the store holds %d after a Close with an ended context, want 100 (nothing sent)", got)
	}
	if err := s.Close(context.Background()); err != nil {
		t.Fatalf("second Close: %v, want nil", err)
	}
	if err := s.Sync(context.Background()); err != nil {
		t.Fatalf("Sync: %v", err)
	}
	if got := remaining(t, mem, b); got != 50 {
		t.Fatalf("the store holds %d after Sync, want 50", got)
	}
}

// refusing is a ledger whose takes fail at once while down is set (a
// Redis whose connections are refused), which opens the breaker.
type refusing struct {
	quota.Reporter
	down atomic.Bool
}

func (r *refusing) Take(ctx context.Context, b []quota.Bucket, res []quota.Result) (bool, error) {
	if r.down.Load() {
		return false, errors.New("dial tcp: connect: connection refused")
	}
	return r.Reporter.Take(ctx, b, res)
}

func (r *refusing) Unwrap() quota.Store { return r.Reporter }

// admitWhileDown takes b n times from s while led refuses every take,
// failing the test unless the fallback allows each locally.
func admitWhileDown(t *testing.T, led *refusing, s quota.Store, b quota.Bucket, n int) {
	t.Helper()
	led.down.Store(true)
	defer led.down.Store(false)
	for i := range n {
		if ok, res := take(t, s, b); !ok || res[0].Source != floodgate.SourceLocalFallback {
			t.Fatalf("take %d: %v %+v, want allowed locally by the fallback", i, ok, res[0])
		}
	}
}

// TestCloseWithTheBreakerOpen: Close sends nothing to a primary the
// breaker holds open, and says so.
func TestCloseWithTheBreakerOpen(t *testing.T) {
	t.Parallel()
	clk := clock.New(time.Unix(1_700_000_000, 0))
	mem := newMemStore(t, clk)
	led := &refusing{Reporter: mem.(quota.Reporter)}
	s, err := fallback.New(led, fallback.WithClock(clk), fallback.WithFailures(1),
		fallback.WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		t.Fatal(err)
	}
	b := tokenBucket("close:open", 1, 10, time.Hour, quota.FailLocal)
	admitWhileDown(t, led, s, b, 3)
	err = s.Close(context.Background())
	if want := "fallback: Close: 3 units owed over 1 keys not handed over to the primary: the breaker is open"; err == nil || err.Error() != want {
		t.Fatalf("Close: %v, want %q", err, want)
	}
	if got := remaining(t, mem, b); got != 10 {
		t.Fatalf("the store holds %d, want 10 (nothing sent while open)", got)
	}
}

// TestCloseUnderLocalFirst: a localfirst Store's Close does not close the
// fallback Store beneath it (its exact store, which the caller owns):
// the units the fallback admitted locally are still owed after it, and
// the fallback's own Close, next, charges them to the primary.
func TestCloseUnderLocalFirst(t *testing.T) {
	t.Parallel()
	clk := clock.New(time.Unix(1_700_000_000, 0))
	mem := newMemStore(t, clk)
	led := &refusing{Reporter: mem.(quota.Reporter)}
	fb, err := fallback.New(led, fallback.WithClock(clk), fallback.WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		t.Fatal(err)
	}
	lf, err := localfirst.New(fb, mem.(quota.Reporter), localfirst.WithClock(clk), localfirst.WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		t.Fatal(err)
	}
	b := tokenBucket("close:lf", 1, 10, time.Hour, quota.FailLocal)
	admitWhileDown(t, led, lf, b, 3)
	ctx, cancel := context.WithTimeout(context.Background(), lateWait)
	defer cancel()
	if err := lf.Close(ctx); err != nil {
		t.Fatalf("localfirst Close: %v", err)
	}
	if st := fb.Stats(); st.Owed != 3 {
		t.Fatalf("owed %d after the localfirst Close, want 3 (the fallback is not closed by it)", st.Owed)
	}
	if err := fb.Close(ctx); err != nil {
		t.Fatalf("fallback Close: %v", err)
	}
	if got := remaining(t, mem, b); got != 7 {
		t.Fatalf("the store holds %d, want 7 (10 - 3 admitted locally)", got)
	}
}

// stalledRig is a fallback Store over a memstore primary on clk, through
// a stalling ledger (led.stall makes it answer nothing), counting 2
// instances and logging nothing.
func stalledRig(t *testing.T, clk *clock.Fake) (*fallback.Store, quota.Store, *stalling) {
	t.Helper()
	mem := newMemStore(t, clk)
	led := &stalling{inner: mem.(quota.Reporter)}
	s, err := fallback.New(led, fallback.WithClock(clk), fallback.WithInstances(func() int { return 2 }),
		fallback.WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		t.Fatal(err)
	}
	return s, mem, led
}

// takeFromStore takes b n times from s, failing the test unless each is
// allowed by the primary.
func takeFromStore(t *testing.T, s *fallback.Store, b quota.Bucket, n int) {
	t.Helper()
	for i := range n {
		if ok, res := take(t, s, b); !ok || res[0].Source.Degraded() {
			t.Fatalf("store take %d: %v %+v", i, ok, res[0])
		}
	}
}
