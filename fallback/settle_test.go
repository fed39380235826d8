package fallback_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/fallback"
	"github.com/floodgate-go/floodgate/quota"
	"github.com/floodgate-go/floodgate/testing/clock"
	"github.com/floodgate-go/floodgate/testing/storetest"
)

// A healthy fallback store passes takes, waits and settlements to its
// primary: it conforms as the primary does.
func TestConformanceHealthy(t *testing.T) {
	t.Parallel()
	storetest.Run(t, func(t *testing.T, clk *clock.Fake) quota.Store {
		s, err := fallback.New(newMemStore(t, clk), fallback.WithClock(clk), fallback.WithTimeout(time.Second))
		if err != nil {
			t.Fatal(err)
		}
		return s
	})
}

func settle(t *testing.T, s *fallback.Store, bs []quota.Bucket, took []quota.Result) {
	t.Helper()
	if err := s.Settle(context.Background(), bs, took); err != nil {
		t.Fatalf("Settle: %v", err)
	}
}

// A bucket decided by its local limiter is settled on it: a charge beyond
// its tokens is debt the next local decisions wait out, a refund puts
// tokens back up to the local burst (x/time/rate has no call that adds
// tokens; a reservation of a negative count does, which this pins).
func TestSettleLocal(t *testing.T) {
	t.Parallel()
	fx := newFixture(t, fallback.WithFailures(1), fallback.WithOpenInterval(time.Hour))
	b := tokenBucket("tenant:acme", 10, 10, time.Second, quota.FailLocal) // 10/s, burst 10
	trip(t, fx, 1, b)                                                     // decided locally: 9 left
	ok, res := take(t, fx.s, b)
	if !ok || res[0].Source != floodgate.SourceLocalFallback || res[0].Remaining != 8 {
		t.Fatalf("local take: %v %+v", ok, res[0])
	}
	// Charge 20 more: 8 - 20 = -12 tokens.
	b20 := b
	b20.Cost = 20
	settle(t, fx.s, []quota.Bucket{b20}, res)
	if ok, res := take(t, fx.s, b); ok || res[0].RetryAfter != 1300*time.Millisecond {
		t.Fatalf("in debt: %v %+v, want a deny with RetryAfter 1.3s (13 tokens at 10/s)", ok, res[0])
	}
	// Give 100 back: capped at the burst of 10.
	b100 := b
	b100.Cost = -100
	settle(t, fx.s, []quota.Bucket{b100}, res)
	for i := range 10 {
		if ok, _ := take(t, fx.s, b); !ok {
			t.Fatalf("take %d of the refunded burst denied", i)
		}
	}
	if ok, _ := take(t, fx.s, b); ok {
		t.Fatal("an 11th take allowed: the refund went past the burst")
	}
	if st := fx.s.Stats(); st.LocalSettled != 2 || st.Settled != 0 {
		t.Fatalf("Stats: local settled %d, settled %d; want 2 and 0", st.LocalSettled, st.Settled)
	}
}

// Buckets the primary decided are settled by the primary; a fail-open
// bucket, which charged nothing, is not settled at all.
func TestSettlePrimary(t *testing.T) {
	t.Parallel()
	fx := newFixture(t)
	b := tokenBucket("tenant:acme", 1, 10, time.Hour, quota.FailLocal)
	b.Cost = 4
	ok, res := take(t, fx.s, b)
	if !ok || res[0].Remaining != 6 {
		t.Fatalf("take: %v %+v", ok, res[0])
	}
	b.Cost = 3
	open := tokenBucket("ip:1", 1, 10, time.Hour, quota.FailOpen)
	open.Cost = 5
	settle(t, fx.s, []quota.Bucket{b, open}, []quota.Result{res[0], {Allowed: true, Source: floodgate.SourceFailOpen}})
	b.Cost = 0
	if _, res := take(t, fx.s, b); res[0].Remaining != 3 {
		t.Fatalf("primary bucket: %d left, want 3", res[0].Remaining)
	}
	open.Cost = 0
	if _, res := take(t, fx.s, open); res[0].Remaining != 10 {
		t.Fatalf("fail-open bucket: %d left, want 10 (nothing was charged, nothing settled)", res[0].Remaining)
	}
	if st := fx.s.Stats(); st.Settled != 1 {
		t.Fatalf("Settled = %d, want 1", st.Settled)
	}
}

// While the breaker is open a settlement of the primary's buckets is not
// sent, and says so.
func TestSettleDroppedWhileOpen(t *testing.T) {
	t.Parallel()
	fx := newFixture(t, fallback.WithFailures(1), fallback.WithOpenInterval(time.Hour))
	b := tokenBucket("tenant:acme", 1, 10, time.Hour, quota.FailLocal)
	trip(t, fx, 1, b)
	calls := fx.f.calls.Load()
	err := fx.s.Settle(context.Background(), []quota.Bucket{b}, nil)
	if err == nil || !strings.Contains(err.Error(), "breaker is open") {
		t.Fatalf("Settle while open: %v", err)
	}
	if st := fx.s.Stats(); st.SettleDropped != 1 || fx.f.calls.Load() != calls {
		t.Fatalf("SettleDropped %d, primary calls +%d; want 1 and none", st.SettleDropped, fx.f.calls.Load()-calls)
	}
}

// A local limiter books units ahead for a bucket that may wait, as the
// stores do: the take is allowed with its wait, and the next one queues
// behind it.
func TestLocalWait(t *testing.T) {
	t.Parallel()
	fx := newFixture(t, fallback.WithFailures(1), fallback.WithOpenInterval(time.Hour))
	b := tokenBucket("tenant:acme", 10, 1, time.Second, quota.FailLocal) // one per 100 ms, burst 1
	b.MaxWait = 250 * time.Millisecond
	trip(t, fx, 1, b) // the burst
	for i, want := range []time.Duration{100 * time.Millisecond, 200 * time.Millisecond} {
		ok, res := take(t, fx.s, b)
		if !ok || res[0].Wait != want {
			t.Fatalf("waiter %d: %v %+v, want allowed with wait %v", i, ok, res[0], want)
		}
	}
	// 300 ms > 250 ms: denied, nothing booked.
	if ok, res := take(t, fx.s, b); ok || res[0].RetryAfter != 300*time.Millisecond || res[0].Wait != 0 {
		t.Fatalf("beyond max wait: %v %+v", ok, res[0])
	}
	fx.clk.Advance(100 * time.Millisecond)
	if ok, res := take(t, fx.s, b); !ok || res[0].Wait != 200*time.Millisecond {
		t.Fatalf("after 100ms: %v %+v, want a wait of 200ms", ok, res[0])
	}
}

// Settle passes a settlement to the real store, or fails as Take does.
func (f *flaky) Settle(ctx context.Context, b []quota.Bucket, took []quota.Result) error {
	f.calls.Add(1)
	if f.fail.Load() {
		return errDown
	}
	return f.inner.(quota.Settler).Settle(ctx, b, took)
}
