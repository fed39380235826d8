package fallback_test

import (
	"context"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/sony/gobreaker/v2"

	"github.com/floodgate-go/floodgate/fallback"
	"github.com/floodgate-go/floodgate/quota"
)

// TestLocalRetryAfterSaturates: a local limiter whose wait exceeds ~292
// years (x/time/rate caps it at MaxInt64) reports the longest wait, not a
// negative one (rounding MaxInt64 up to a microsecond wrapped), which
// tiers.Limiter reads as "cost exceeds capacity".
func TestLocalRetryAfterSaturates(t *testing.T) {
	t.Parallel()
	fx := newFixture(t, fallback.WithFailures(1), fallback.WithOpenInterval(time.Hour))
	// Valid limit: 1 unit per 366 days, burst 1000.
	b := tokenBucket("user:1", 1, 1000, quota.MaxPeriod, quota.FailLocal)
	b.Cost = 1000
	trip(t, fx, 1, tokenBucket("trip", 1, 1, time.Second, quota.FailOpen))
	if ok, res := take(t, fx.s, b); !ok {
		t.Fatalf("first take of the full local burst denied: %+v", res[0])
	}
	ok, res := take(t, fx.s, b)
	if ok {
		t.Fatal("second take of the whole burst allowed")
	}
	if res[0].RetryAfter < 0 {
		t.Fatalf("local deny reports RetryAfter %d (%s): negative (not Never) for a cost within capacity", int64(res[0].RetryAfter), res[0].RetryAfter)
	}
}

// TestSeedAfterClockWrap: lastKnown packs "ms since New" in 34 bits,
// which wrap after 2^34 ms (~199 days of uptime). Past that, an answer
// just recorded must still read as just recorded (it read as ~199 days
// old, refilled to full, so a key the store just said was empty got a
// full local bucket).
func TestSeedAfterClockWrap(t *testing.T) {
	t.Parallel()
	fx := newFixture(t, fallback.WithFailures(1), fallback.WithOpenInterval(time.Hour))
	fx.clk.Advance(time.Duration(1<<34)*time.Millisecond + 10*time.Second) // ~199 days after New
	b := tokenBucket("tenant:acme", 1, 10, time.Hour, quota.FailLocal)     // 1 unit/hour
	for i := 0; i < 10; i++ {
		if ok, _ := take(t, fx.s, b); !ok {
			t.Fatalf("store denied take %d", i)
		}
	}
	// The store just said 0 are left; it goes down at this same instant.
	fx.f.fail.Store(true)
	n := 0
	for ; n < 20; n++ {
		ok, _ := take(t, fx.s, b)
		if !ok {
			break
		}
	}
	if n != 0 {
		t.Fatalf("local limiter admitted %d right after the store said 0 were left (uptime ~199 days), want 0", n)
	}
}

// TestSeedKeepsMinimumBurst: the burst of a share is at least 1, and so
// is a seeded share while the fleet's bucket holds a unit: floor(fleet/n)
// was 0 when the capacity is below the instance count, so a key whose
// store bucket was full was denied while a key never seen was allowed.
func TestSeedKeepsMinimumBurst(t *testing.T) {
	t.Parallel()
	fx := newFixture(t, fallback.WithFailures(1), fallback.WithOpenInterval(time.Hour),
		fallback.WithInstances(func() int { return 4 }))
	seen := tokenBucket("user:seen", 3, 3, time.Hour, quota.FailLocal)
	if ok, _ := take(t, fx.s, seen); !ok {
		t.Fatal("store denied")
	}
	fx.clk.Advance(2 * time.Hour) // the store's bucket is full again
	trip(t, fx, 1, tokenBucket("trip", 1, 1, time.Second, quota.FailOpen))
	fresh := tokenBucket("user:fresh", 3, 3, time.Hour, quota.FailLocal)
	okFresh, _ := take(t, fx.s, fresh)
	okSeen, res := take(t, fx.s, seen)
	if okFresh && !okSeen {
		t.Fatalf("full key denied locally (%+v) while a never-seen key with the same limit is allowed", res[0])
	}
}

// TestLRUKeepsEntriesInUse: with fewer local slots than buckets in a
// take, the take's own limiters are not evicted while it decides (each
// get evicted the one the same take had just charged, so every take saw
// fresh limiters and nothing was ever denied).
func TestLRUKeepsEntriesInUse(t *testing.T) {
	t.Parallel()
	fx := newFixture(t, fallback.WithFailures(1), fallback.WithOpenInterval(time.Hour), fallback.WithLocalCapacity(1))
	trip(t, fx, 1, tokenBucket("trip", 1, 1, time.Second, quota.FailOpen))
	a := tokenBucket("a", 1, 1, time.Hour, quota.FailLocal)
	b := tokenBucket("b", 1, 1, time.Hour, quota.FailLocal)
	allowed := 0
	for i := 0; i < 10; i++ {
		if ok, _ := take(t, fx.s, a, b); ok {
			allowed++
		}
	}
	if allowed > 1 {
		t.Fatalf("%d of 10 takes allowed on two buckets of burst 1 and rate 1/hour, want 1", allowed)
	}
}

// heldPrimary fails every call with errDown while down; a call on key
// "held" blocks until release is closed, then fails.
type heldPrimary struct {
	inner   quota.Store
	mu      sync.Mutex
	down    bool
	entered chan struct{}
	release chan struct{}
}

func (p *heldPrimary) Take(ctx context.Context, b []quota.Bucket, r []quota.Result) (bool, error) {
	if b[0].Key == "held" {
		close(p.entered)
		<-p.release
		return false, errDown
	}
	p.mu.Lock()
	down := p.down
	p.mu.Unlock()
	if down {
		return false, errDown
	}
	return p.inner.Take(ctx, b, r)
}

// TestStaleFailureLeavesProbe: a call that entered the fast path while
// the breaker was closed and fails after it went open and half-open is
// not counted (gobreaker itself drops results of an earlier state); it
// was replayed in the new state, took the probe's place and reopened the
// breaker though the store was back.
func TestStaleFailureLeavesProbe(t *testing.T) {
	t.Parallel()
	const open = 30 * time.Millisecond
	fx := newFixture(t) // for the memstore
	p := &heldPrimary{inner: fx.inner, entered: make(chan struct{}), release: make(chan struct{})}
	var mu sync.Mutex
	var trans []gobreaker.State
	s, err := fallback.New(p, fallback.WithFailures(1), fallback.WithOpenInterval(open),
		fallback.WithTimeout(time.Second), fallback.WithLogger(slog.New(slog.DiscardHandler)),
		fallback.WithOnStateChange(func(_ string, _, to gobreaker.State) {
			mu.Lock()
			trans = append(trans, to)
			mu.Unlock()
		}))
	if err != nil {
		t.Fatal(err)
	}
	k := tokenBucket("k", 100, 100, time.Second, quota.FailOpen)
	held := tokenBucket("held", 100, 100, time.Second, quota.FailOpen)
	done := make(chan struct{})
	go func() {
		defer close(done)
		_, _ = s.Take(context.Background(), []quota.Bucket{held}, make([]quota.Result, 1))
	}()
	<-p.entered // in flight on the fast path, breaker closed
	p.mu.Lock()
	p.down = true
	p.mu.Unlock()
	take(t, s, k) // trips
	if st := s.State(); st != gobreaker.StateOpen {
		t.Fatalf("state %s, want open", st)
	}
	p.mu.Lock()
	p.down = false // the store is back
	p.mu.Unlock()
	time.Sleep(open + 20*time.Millisecond)
	if st := s.State(); st != gobreaker.StateHalfOpen {
		t.Fatalf("state %s, want half-open", st)
	}
	close(p.release) // the old call's failure arrives now
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("held take did not return")
	}
	mu.Lock()
	got := append([]gobreaker.State(nil), trans...)
	mu.Unlock()
	if st := s.State(); st != gobreaker.StateHalfOpen {
		t.Fatalf("a failure of a call started while closed (before the outage) decided the half-open state: now %s, transitions %v", st, got)
	}
}
