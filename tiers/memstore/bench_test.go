package memstore_test

import (
	"context"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate/quota"
	"golang.org/x/time/rate"
)

// The benchmarks use the system clock and generous limits, so most takes
// allow and every bucket keeps being written: the steady state of a busy
// service. Keys are built before the timer starts, as the policy's prebuilt
// prefixes would; the store's own work is what is measured.

const benchKeys = 10_000

var (
	benchTenant = quota.Limit{Algorithm: quota.FixedWindow, Rate: 1_000_000_000, Period: time.Minute}
	benchUser   = quota.Limit{Algorithm: quota.TokenBucket, Rate: 1_000_000, Period: time.Second, Burst: 1_000_000}
	benchAPIKey = quota.Limit{Algorithm: quota.GCRA, Rate: 1_000_000, Period: time.Second, Burst: 1_000_000}
	benchIP     = quota.Limit{Algorithm: quota.SlidingWindowCounter, Rate: 1_000_000_000, Period: time.Minute}
)

// takes builds benchKeys takes of the given depth: 1 level is a user
// bucket; 4 levels are tenant (100 tenants), user, API key and IP.
func takes(levels int) [][]quota.Bucket {
	out := make([][]quota.Bucket, benchKeys)
	for i := range out {
		n := strconv.Itoa(i)
		user := quota.Bucket{Key: "rl:user:{u" + n + "}", Limit: benchUser, Cost: 1}
		if levels == 1 {
			out[i] = []quota.Bucket{user}
			continue
		}
		out[i] = []quota.Bucket{
			{Key: "rl:tenant:{t" + strconv.Itoa(i%100) + "}", Limit: benchTenant, Cost: 1},
			user,
			{Key: "rl:apikey:{k" + n + "}", Limit: benchAPIKey, Cost: 1},
			{Key: "rl:ip:{10.0." + strconv.Itoa(i/256%256) + "." + strconv.Itoa(i%256) + "}", Limit: benchIP, Cost: 1},
		}
	}
	return out
}

func benchSerial(b *testing.B, bs [][]quota.Bucket) { benchSerialWarm(b, bs, 0) }

// benchSerialWarm first takes every key once, then keeps cycling for at
// least warm, so that state which fills over a window (a sliding log's
// ring) is at its working size before the timer starts.
func benchSerialWarm(b *testing.B, bs [][]quota.Bucket, warm time.Duration) {
	s := newStore(b)
	ctx := context.Background()
	res := make([]quota.Result, 4)
	for start, i := time.Now(), 0; i < len(bs) || i%1024 != 0 || time.Since(start) < warm; i++ {
		if _, err := s.Take(ctx, bs[i%len(bs)], res); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportAllocs()
	b.ResetTimer()
	c0 := cpuTime()
	i := 0
	for b.Loop() {
		if _, err := s.Take(ctx, bs[i], res); err != nil {
			b.Fatal(err)
		}
		i++
		if i == len(bs) {
			i = 0
		}
	}
	reportCPU(b, c0)
}

// reportCPU adds the metric cpu-ns/op: process CPU time over the timed
// loop divided by the number of ops.
func reportCPU(b *testing.B, c0 int64) {
	if c1 := cpuTime(); c0 >= 0 && c1 >= 0 && b.N > 0 {
		b.ReportMetric(float64(c1-c0)/float64(b.N), "cpu-ns/op")
	}
}

func benchParallel(b *testing.B, bs [][]quota.Bucket) {
	s := newStore(b)
	ctx := context.Background()
	res := make([]quota.Result, 4)
	for _, t := range bs {
		if _, err := s.Take(ctx, t, res); err != nil {
			b.Fatal(err)
		}
	}
	var start atomic.Int64
	b.ReportAllocs()
	b.ResetTimer()
	c0 := cpuTime()
	defer reportCPU(b, c0)
	b.RunParallel(func(pb *testing.PB) {
		i := int(start.Add(1)*7919) % len(bs)
		res := make([]quota.Result, 4)
		for pb.Next() {
			if _, err := s.Take(ctx, bs[i], res); err != nil {
				b.Error(err)
				return
			}
			i++
			if i == len(bs) {
				i = 0
			}
		}
	})
}

func BenchmarkTake1Level(b *testing.B)          { benchSerial(b, takes(1)) }
func BenchmarkTake4Levels(b *testing.B)         { benchSerial(b, takes(4)) }
func BenchmarkTake1LevelParallel(b *testing.B)  { benchParallel(b, takes(1)) }
func BenchmarkTake4LevelsParallel(b *testing.B) { benchParallel(b, takes(4)) }

// BenchmarkTakeAlgorithm is one level per algorithm over 10k keys.
func BenchmarkTakeAlgorithm(b *testing.B) {
	for _, l := range []quota.Limit{
		benchUser, benchAPIKey, benchIP,
		{Algorithm: quota.SlidingWindowLog, Rate: 1000, Period: time.Second},
		benchTenant,
	} {
		b.Run(l.Algorithm.String(), func(b *testing.B) {
			bs := make([][]quota.Bucket, benchKeys)
			for i := range bs {
				bs[i] = []quota.Bucket{{Key: "rl:k:" + strconv.Itoa(i), Limit: l, Cost: 1}}
			}
			var warm time.Duration
			if l.Algorithm == quota.SlidingWindowLog {
				warm = l.Period + l.Period/10
			}
			benchSerialWarm(b, bs, warm)
		})
	}
}

// BenchmarkXTimeRate1Level is the yardstick the issue names: a map of 10k
// golang.org/x/time/rate limiters behind one mutex, one Allow per op, so
// the memstore figures can be read against it on the same machine and load.
func BenchmarkXTimeRate1Level(b *testing.B) {
	keys := make([]string, benchKeys)
	m := make(map[string]*rate.Limiter, benchKeys)
	for i := range keys {
		keys[i] = "rl:user:{u" + strconv.Itoa(i) + "}"
		m[keys[i]] = rate.NewLimiter(1_000_000, 1_000_000)
	}
	var mu sync.Mutex
	b.ReportAllocs()
	b.ResetTimer()
	c0 := cpuTime()
	i := 0
	for b.Loop() {
		mu.Lock()
		m[keys[i]].Allow()
		mu.Unlock()
		i++
		if i == len(keys) {
			i = 0
		}
	}
	reportCPU(b, c0)
}
