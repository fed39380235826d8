package localfirst_test

import (
	"context"
	"math/rand/v2"
	"strconv"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate/quota"
	"github.com/floodgate-go/floodgate/testing/clock"
	"github.com/floodgate-go/floodgate/tiers/localfirst"
	"github.com/floodgate-go/floodgate/tiers/memstore"
)

// memLocal returns a local-first store over one memstore, its exact store
// and ledger, closed when b ends.
func memLocal(b *testing.B) *localfirst.Store {
	b.Helper()
	ledger, err := memstore.New()
	if err != nil {
		b.Fatal(err)
	}
	s, err := localfirst.New(ledger, ledger)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = s.Close(context.Background()) })
	return s
}

// BenchmarkTakeLocal measures a 4-level take decided locally (every level
// async or leased, keys warm), the path local-first exists for.
func BenchmarkTakeLocal(b *testing.B) {
	for _, mode := range []quota.Consistency{quota.Async, quota.Leased} {
		b.Run(mode.String(), func(b *testing.B) {
			s := memLocal(b)
			bs := make([]quota.Bucket, 4)
			for i := range bs {
				bs[i] = bucket("bench:"+strconv.Itoa(i), mode, 1_000_000_000, 1_000_000_000)
				bs[i].SyncInterval = 50 * time.Millisecond
			}
			res := make([]quota.Result, len(bs))
			for range 100 { // warm: learn the state, grow the leases
				_, _ = s.Take(context.Background(), bs, res)
			}
			b.ReportAllocs()
			b.ResetTimer()
			for b.Loop() {
				if ok, err := s.Take(context.Background(), bs, res); !ok || err != nil {
					b.Fatal(ok, err)
				}
			}
		})
	}
}

// BenchmarkTakeLocalMany is grpcload's four levels (a user's, a tenant's
// that a hundred users share, an API key's, a method and user's) over
// 10 000 principals drawn by zipf, decided locally on the real clock: the
// take and, in the background, the syncs reporting the keys (B/op is
// theirs: a sync allocates per report call, not per key).
func BenchmarkTakeLocalMany(b *testing.B) {
	for _, mode := range []quota.Consistency{quota.Async, quota.Leased} {
		b.Run(mode.String(), func(b *testing.B) {
			s := memLocal(b)
			const principals = 10_000
			lim := func(n int64) quota.Limit {
				return quota.Limit{Algorithm: quota.TokenBucket, Rate: n, Period: time.Second, Burst: n}
			}
			bss := make([][]quota.Bucket, principals)
			for p := range bss {
				u := strconv.Itoa(p)
				bss[p] = []quota.Bucket{
					{Key: "{user=" + u + "}:user", Rule: "user", Limit: lim(1000), Cost: 1, Consistency: mode},
					{Key: "{tenant=" + strconv.Itoa(p/100) + "}:tenant", Rule: "tenant", Limit: lim(100_000), Cost: 1, Consistency: mode},
					{Key: "{api_key=#" + u + "}:api-key", Rule: "api-key", Limit: lim(1000), Cost: 1, Consistency: mode},
					{Key: "{user=" + u + "}:method-user:endpoint=Plain", Rule: "method-user", Limit: lim(1000), Cost: 1, Consistency: mode},
				}
			}
			z := rand.NewZipf(rand.New(rand.NewPCG(1, 2)), 1.1, 1, principals-1)
			seq := make([]int, 1<<16)
			for i := range seq {
				seq[i] = int(z.Uint64())
			}
			res := make([]quota.Result, 4)
			ctx := context.Background()
			for i := range 20_000 { // warm: the keys, their state and leases
				_, _ = s.Take(ctx, bss[seq[i&(1<<16-1)]], res)
			}
			b.ReportAllocs()
			b.ResetTimer()
			i := 0
			for b.Loop() {
				_, _ = s.Take(ctx, bss[seq[i&(1<<16-1)]], res)
				i++
			}
		})
	}
}

// BenchmarkSyncTick measures what the background goroutine pays a tick
// (one Sync, the clock one tick later) while n keys hold leases that
// expire a year later: nothing is due, so the work is only finding that
// out. Under the race detector the 100 000 keys are skipped: their setup
// takes 20 s there, and the smaller sizes run the same code.
func BenchmarkSyncTick(b *testing.B) {
	for _, n := range []int{1_000, 10_000, 100_000} {
		b.Run("keys="+strconv.Itoa(n), func(b *testing.B) {
			if raceEnabled && n > 10_000 {
				b.Skip("under the race detector, whose figures mean nothing: the smaller sizes run the same code")
			}
			clk := clock.New(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
			ledger, err := memstore.New(memstore.WithClock(clk))
			if err != nil {
				b.Fatal(err)
			}
			s, err := localfirst.New(ledger, ledger, localfirst.WithClock(clk), localfirst.WithManualSync(),
				localfirst.WithLeaseTTL(365*24*time.Hour), localfirst.WithLeaseTarget(time.Second))
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close(context.Background())
			ctx := context.Background()
			res := make([]quota.Result, 1)
			// Each key: a first take (exact, no lease), then, a second
			// later, a take that leases for its demand.
			for round := range 2 {
				for i := range n {
					bk := bucket("k"+strconv.Itoa(i), quota.Leased, 1_000_000, 1_000_000)
					if ok, err := s.Take(ctx, []quota.Bucket{bk}, res); !ok || err != nil {
						b.Fatal(ok, err)
					}
				}
				if round == 0 {
					clk.Advance(time.Second)
				}
			}
			if st := s.Stats(); st.Leases != uint64(n) {
				b.Fatalf("%d leases for %d keys", st.Leases, n)
			}
			b.ReportAllocs()
			b.ResetTimer()
			for b.Loop() {
				clk.Advance(10 * time.Millisecond)
				if err := s.Sync(ctx); err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			if st := s.Stats(); st.ReturnedUnits != 0 || st.Reports != 0 {
				b.Fatalf("%d units returned, %d reports while nothing was due", st.ReturnedUnits, st.Reports)
			}
		})
	}
}

// BenchmarkTakeNewKeyFull measures a take of a key never seen while the
// Store holds its bound of keys, every one of them owing a report (none
// idle, none can be dropped): the key goes to the exact store (an
// overflow). A flood of new keys (addresses, tokens) costs this per
// request. Under the race detector, whose figures mean nothing, the bound
// is 10 000 keys: the same code, a tenth of the setup (5 s there at
// 100 000).
func BenchmarkTakeNewKeyFull(b *testing.B) {
	keys := 100_000
	if raceEnabled {
		keys = 10_000
	}
	ledger, err := memstore.New()
	if err != nil {
		b.Fatal(err)
	}
	s, err := localfirst.New(ledger, ledger, localfirst.WithManualSync(), localfirst.WithMaxKeys(keys))
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close(context.Background())
	ctx := context.Background()
	res := make([]quota.Result, 1)
	for i := range keys {
		bk := bucket("held"+strconv.Itoa(i), quota.Async, 1_000_000, 1_000_000)
		if ok, err := s.Take(ctx, []quota.Bucket{bk}, res); !ok || err != nil {
			b.Fatal(ok, err)
		}
	}
	bs := make([]quota.Bucket, 1024)
	for i := range bs {
		bs[i] = bucket("new"+strconv.Itoa(i), quota.Async, 1_000_000, 1_000_000)
	}
	b.ReportAllocs()
	b.ResetTimer()
	i := 0
	for b.Loop() {
		if ok, err := s.Take(ctx, bs[i%len(bs):i%len(bs)+1], res); !ok || err != nil {
			b.Fatal(ok, err)
		}
		i++
	}
	b.StopTimer()
	if st := s.Stats(); st.Overflow == 0 || st.Keys != keys {
		b.Fatalf("%+v: want the new keys decided exactly, the held ones kept", st)
	}
}
