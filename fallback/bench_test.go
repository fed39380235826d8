package fallback_test

import (
	"context"
	"log/slog"
	"strconv"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/fallback"
	"github.com/floodgate-go/floodgate/quota"
)

// benchBuckets is a three-level take that always allows.
func benchBuckets() []quota.Bucket {
	b := make([]quota.Bucket, 3)
	for i := range b {
		b[i] = quota.Bucket{
			Key:   "bench:" + strconv.Itoa(i),
			Limit: quota.Limit{Algorithm: quota.TokenBucket, Rate: quota.MaxRate, Period: time.Second, Burst: quota.MaxRate},
			Cost:  1,
		}
	}
	return b
}

func runTakes(b *testing.B, s quota.Store, ctx context.Context) {
	buckets := benchBuckets()
	res := make([]quota.Result, len(buckets))
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		ok, err := s.Take(ctx, buckets, res)
		if err != nil || !ok {
			b.Fatalf("take: allowed=%v err=%v", ok, err)
		}
	}
}

func newBenchStore(b *testing.B, primary quota.Store) *fallback.Store {
	s, err := fallback.New(primary, fallback.WithLogger(slog.New(slog.DiscardHandler)), fallback.WithTimeout(time.Second))
	if err != nil {
		b.Fatal(err)
	}
	return s
}

// allowStore is the cheapest possible store: it allows everything without
// state. Benchmarks use it to isolate the wrapper's own cost.
type allowStore struct{}

func (allowStore) Take(_ context.Context, b []quota.Bucket, r []quota.Result) (bool, error) {
	for i := range b {
		r[i] = quota.Result{Allowed: true, Limit: b[i].Limit.Capacity()}
	}
	return true, nil
}

// BenchmarkHealthy compares the bare in-process store with the same store
// behind the breaker and the timeout: the difference is the wrapper's
// overhead on the healthy path.
func BenchmarkHealthy(b *testing.B) {
	for _, cc := range []struct {
		name string
		ctx  func() (context.Context, context.CancelFunc)
	}{
		{"background", func() (context.Context, context.CancelFunc) { return context.Background(), func() {} }},
		{"cancelable", func() (context.Context, context.CancelFunc) { return context.WithCancel(context.Background()) }},
	} {
		b.Run("bare/"+cc.name, func(b *testing.B) {
			ctx, cancel := cc.ctx()
			defer cancel()
			runTakes(b, newMemStore(b, floodgate.SystemClock()), ctx)
		})
		b.Run("fallback/"+cc.name, func(b *testing.B) {
			ctx, cancel := cc.ctx()
			defer cancel()
			runTakes(b, newBenchStore(b, newMemStore(b, floodgate.SystemClock())), ctx)
		})
		b.Run("bare-noop/"+cc.name, func(b *testing.B) {
			ctx, cancel := cc.ctx()
			defer cancel()
			runTakes(b, allowStore{}, ctx)
		})
		b.Run("fallback-noop/"+cc.name, func(b *testing.B) {
			ctx, cancel := cc.ctx()
			defer cancel()
			runTakes(b, newBenchStore(b, allowStore{}), ctx)
		})
	}
}

// BenchmarkDegraded is the cost of a decision while the breaker is open: a
// three-level take decided by local limiters.
func BenchmarkDegraded(b *testing.B) {
	s, err := fallback.New(downStore{}, fallback.WithLogger(slog.New(slog.DiscardHandler)), fallback.WithFailures(1), fallback.WithOpenInterval(time.Hour))
	if err != nil {
		b.Fatal(err)
	}
	runTakes(b, s, context.Background())
	if st := s.Stats(); st.State.String() != "open" {
		b.Fatalf("breaker %s, want open", st.State)
	}
}
