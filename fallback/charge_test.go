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
	"github.com/floodgate-go/floodgate/tiers/redisstore"
)

var errLostReply = errors.New("stalling: the reply was lost")

// stalling is a ledger (a quota.Reporter) that stalls on command: its
// takes run out of their budget (a paused or busy Redis), and its report
// calls can lose their reply, after being applied or before.
type stalling struct {
	inner quota.Reporter
	stall atomic.Bool
	// loseAfter: the next report is applied, its reply lost.
	loseAfter atomic.Bool
	// loseBefore: the next report never arrives.
	loseBefore atomic.Bool
}

func (s *stalling) Take(ctx context.Context, b []quota.Bucket, r []quota.Result) (bool, error) {
	if s.stall.Load() {
		return false, context.DeadlineExceeded
	}
	return s.inner.Take(ctx, b, r)
}

func (s *stalling) Report(ctx context.Context, instance, seq uint64, b []quota.Bucket, r []quota.ReportResult) error {
	if s.loseBefore.Swap(false) {
		return errLostReply
	}
	if err := s.inner.Report(ctx, instance, seq, b, r); err != nil {
		return err
	}
	if s.loseAfter.Swap(false) {
		clear(r[:len(b)])
		return errLostReply
	}
	return nil
}

func (s *stalling) Resolve(ctx context.Context, instance, seq uint64, b []quota.Bucket, r []quota.ReportResult) error {
	return s.inner.Resolve(ctx, instance, seq, b, r)
}

func (s *stalling) Unwrap() quota.Store { return s.inner }

// remaining reads what the store's bucket holds, charging nothing.
func remaining(t *testing.T, st quota.Store, b quota.Bucket) int64 {
	t.Helper()
	b.Cost = 0
	res := make([]quota.Result, 1)
	if _, err := st.Take(context.Background(), []quota.Bucket{b}, res); err != nil {
		t.Fatalf("read %s: %v", b.Key, err)
	}
	return res[0].Remaining
}

// TestLocalAdmitsAreCharged: units admitted locally while the store
// stalls are charged to it once it answers, exactly once, through the
// recorded report path: a report whose reply was lost after it was
// applied is resolved, not sent again; one lost before it arrived is sent
// again. The bucket holds 100 units and refills 1 an hour, on a fake
// clock that does not move, so what Redis holds is exactly 100 minus
// what was charged.
func TestLocalAdmitsAreCharged(t *testing.T) {
	clk := clock.New(time.Unix(1_700_000_000, 0))
	srv := redistest.Start(t)
	rs, err := redisstore.New(srv.Client(), redisstore.WithClock(clk))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = rs.Close() })
	led := &stalling{inner: rs}
	s, err := fallback.New(led, fallback.WithClock(clk), fallback.WithManualSync(),
		fallback.WithInstances(func() int { return 2 }), fallback.WithLogger(slog.New(slog.NewTextHandler(testWriter{t}, nil))))
	if err != nil {
		t.Fatal(err)
	}
	if !s.ChargesLocal() {
		t.Fatal("ChargesLocal is false over a redis store")
	}
	ctx := context.Background()
	for _, c := range []struct {
		key  string
		lose *atomic.Bool
	}{{"charge:after", &led.loseAfter}, {"charge:before", &led.loseBefore}} {
		t.Run(c.key, func(t *testing.T) {
			b := tokenBucket(c.key, 1, 100, time.Hour, quota.FailLocal)
			for i := range 10 {
				if ok, res := take(t, s, b); !ok || res[0].Source.Degraded() {
					t.Fatalf("store take %d: %v %+v", i, ok, res[0])
				}
			}
			// The stall: 90 left, 2 instances, so this one's share is 45.
			led.stall.Store(true)
			n := 0
			for ; n < 200; n++ {
				ok, res := take(t, s, b)
				if !ok {
					break
				}
				if res[0].Source != floodgate.SourceLocalFallback {
					t.Fatalf("take %d decided by %s", n, res[0].Source)
				}
			}
			if n != 45 {
				t.Fatalf("admitted %d locally, want 45 (90 left / 2 instances)", n)
			}
			led.stall.Store(false)
			if got := remaining(t, rs, b); got != 90 {
				t.Fatalf("Redis holds %d before the report, want 90", got)
			}
			c.lose.Store(true)
			if err := s.Sync(ctx); err == nil {
				t.Fatal("Sync with a lost reply returned nil")
			}
			for range 2 { // the lost call is resolved, then nothing is left
				if err := s.Sync(ctx); err != nil {
					t.Fatalf("Sync: %v", err)
				}
			}
			if got, want := remaining(t, rs, b), int64(90-n); got != want {
				t.Fatalf("Redis holds %d after the stall, want %d: charged %d for %d admitted locally", got, want, 90-got, n)
			}
			if st := s.Stats(); st.Owed != 0 {
				t.Fatalf("still owed %d units", st.Owed)
			}
		})
	}
	st := s.Stats()
	if st.Charged != 90 || st.ReportFailures != 2 || st.Debt != 0 {
		t.Fatalf("Stats: charged %d, report failures %d, debt %d; want 90, 2, 0", st.Charged, st.ReportFailures, st.Debt)
	}
}
