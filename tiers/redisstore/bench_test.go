package redisstore_test

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/floodgate-go/floodgate/quota"
	"github.com/floodgate-go/floodgate/testing/redistest"
	"github.com/floodgate-go/floodgate/tiers/redisstore"
)

// BenchmarkTake measures one Take of 1 and 4 levels against a local
// redis-server on Redis TIME, serially (latency, client allocations) and
// with parallel callers (throughput): unbatched (WithBatching(0, 0); the
// rows without a suffix and "parallel"), with the default batching
// ("default", "parallel-default") and with WithBatching(4, 64)
// ("parallel-batched"). Keys cycle over 10k principals so Redis does real
// work; limits are generous so most takes are allowed.
func BenchmarkTake(b *testing.B) {
	srv := redistest.Start(b)
	admin := srv.Client()
	plain, def := plainAndDefault(b, srv)
	batched, err := redisstore.New(srv.NewClient(), redisstore.WithBatching(4, 64))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = batched.Close() })
	limits := []quota.Limit{
		{Algorithm: quota.TokenBucket, Rate: 1000, Period: time.Second, Burst: 1000},
		{Algorithm: quota.GCRA, Rate: 1000, Period: time.Second, Burst: 1000},
		{Algorithm: quota.SlidingWindowCounter, Rate: 100000, Period: time.Minute},
		{Algorithm: quota.FixedWindow, Rate: 100000, Period: time.Minute},
	}
	const principals = 10_000
	sets := func(levels int) [][]quota.Bucket {
		out := make([][]quota.Bucket, principals)
		for p := range out {
			bs := make([]quota.Bucket, levels)
			for i := range bs {
				bs[i] = quota.Bucket{Key: fmt.Sprintf("{u=%d}:l%d", p, i), Limit: limits[i], Cost: 1}
			}
			out[p] = bs
		}
		return out
	}
	for _, levels := range []int{1, 4} {
		bss := sets(levels)
		for _, v := range []struct {
			name string
			st   *redisstore.Store
		}{{"", plain}, {"/default", def}} {
			st := v.st
			b.Run(fmt.Sprintf("levels=%d%s", levels, v.name), func(b *testing.B) {
				ctx := context.Background()
				var res [4]quota.Result
				b.ReportAllocs()
				i := 0
				cpu0, r0 := processCPU(), redisCPU(b, admin)
				for b.Loop() {
					if _, err := st.Take(ctx, bss[i%principals], res[:levels]); err != nil {
						b.Fatal(err)
					}
					i++
				}
				// redis-server is another process: this is the client's CPU.
				b.ReportMetric(float64(processCPU()-cpu0)/float64(b.N), "client-cpu-ns/op")
				b.ReportMetric(float64(redisCPU(b, admin)-r0)/float64(b.N), "redis-cpu-ns/op")
			})
		}
		for _, v := range []struct {
			name string
			st   *redisstore.Store
		}{{"parallel", plain}, {"parallel-default", def}, {"parallel-batched", batched}} {
			st := v.st
			b.Run(fmt.Sprintf("levels=%d/%s", levels, v.name), func(b *testing.B) {
				ctx := context.Background()
				b.ReportAllocs()
				b.SetParallelism(32) // 64 callers on 2 CPUs
				cpu0, r0 := processCPU(), redisCPU(b, admin)
				b.RunParallel(func(pb *testing.PB) {
					var res [4]quota.Result
					i := 0
					for pb.Next() {
						if _, err := st.Take(ctx, bss[i%principals], res[:levels]); err != nil {
							b.Error(err)
							return
						}
						i += 7
					}
				})
				b.ReportMetric(float64(processCPU()-cpu0)/float64(b.N), "client-cpu-ns/op")
				b.ReportMetric(float64(redisCPU(b, admin)-r0)/float64(b.N), "redis-cpu-ns/op")
			})
		}
	}
}

// plainAndDefault returns two stores on srv, each with a client of its
// own: one unbatched (WithBatching(0, 0)) and one with the defaults.
func plainAndDefault(b *testing.B, srv *redistest.Server) (plain, def *redisstore.Store) {
	plain, err := redisstore.New(srv.NewClient(), redisstore.WithBatching(0, 0))
	if err != nil {
		b.Fatal(err)
	}
	def, err = redisstore.New(srv.NewClient())
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = def.Close() })
	return plain, def
}

// clusterCPU returns the CPU time the cluster's masters have used, summed
// (see redisCPU).
func clusterCPU(b *testing.B, nodes []*redis.Client) time.Duration {
	var sum time.Duration
	for _, n := range nodes {
		sum += redisCPU(b, n)
	}
	return sum
}

// masters returns a client of each master of the cluster c was seeded
// with (the shared cluster's seeds are its masters), closed when b ends.
func masters(b *testing.B, c *redis.ClusterClient) []*redis.Client {
	var out []*redis.Client
	for _, addr := range c.Options().Addrs {
		n := redis.NewClient(&redis.Options{Addr: addr})
		b.Cleanup(func() { _ = n.Close() })
		out = append(out, n)
	}
	return out
}

// processCPU returns the user+system CPU time this process has used.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// redisCPU returns the CPU time (user+system) the redis-server process
// has used, from /proc: the server-side cost per decision, scripts and
// networking included. It returns -1 where /proc is not available.
func redisCPU(b *testing.B, c *redis.Client) time.Duration {
	info, err := c.Info(context.Background(), "server").Result()
	if err != nil {
		b.Fatal(err)
	}
	pid := ""
	for _, line := range strings.Split(info, "\r\n") {
		if v, ok := strings.CutPrefix(line, "process_id:"); ok {
			pid = v
		}
	}
	stat, err := os.ReadFile("/proc/" + pid + "/stat")
	if err != nil {
		return -1
	}
	// Fields after the ")" that ends the command name: state is field 3,
	// utime and stime are fields 14 and 15, in clock ticks (USER_HZ, 100).
	f := strings.Fields(string(stat[strings.LastIndexByte(string(stat), ')')+2:]))
	ut, _ := strconv.ParseInt(f[11], 10, 64)
	st, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(ut+st) * 10 * time.Millisecond
}

// BenchmarkTakeCluster measures a 4-level take on a 3-master cluster when
// the levels share one hash tag (one script; batched per slot by default)
// and when they sit in four slots (four parts sent at once, refunds on a
// deny; batched, the parts of each master merged into one call), with the
// default batching and without
// ("/unbatched"). On the package's shared cluster, idle while benchmarks
// run (they run after the tests), under a prefix of the benchmark's own.
func BenchmarkTakeCluster(b *testing.B) {
	c, prefix := redisstore.SharedCluster(b)
	nodes := masters(b, c)
	def, err := redisstore.New(c, redisstore.WithPrefix(prefix))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = def.Close() })
	plain, err := redisstore.New(c, redisstore.WithBatching(0, 0), redisstore.WithPrefix(prefix))
	if err != nil {
		b.Fatal(err)
	}
	l := quota.Limit{Algorithm: quota.TokenBucket, Rate: 1000, Period: time.Second, Burst: 1000}
	const principals = 10_000
	for _, shape := range []string{"one-slot", "four-slots"} {
		bss := make([][]quota.Bucket, principals)
		for p := range bss {
			bs := make([]quota.Bucket, 4)
			for i := range bs {
				key := fmt.Sprintf("{u=%d}:l%d", p, i)
				if shape == "four-slots" {
					key = fmt.Sprintf("{u=%d:l%d}", p, i)
				}
				bs[i] = quota.Bucket{Key: key, Limit: l, Cost: 1}
			}
			bss[p] = bs
		}
		for _, v := range []struct {
			name string
			st   *redisstore.Store
		}{{"", def}, {"/unbatched", plain}} {
			st := v.st
			b.Run(shape+v.name, func(b *testing.B) {
				ctx := context.Background()
				b.ReportAllocs()
				b.SetParallelism(32)
				cpu0, r0 := processCPU(), clusterCPU(b, nodes)
				defer func() {
					b.ReportMetric(float64(processCPU()-cpu0)/float64(b.N), "client-cpu-ns/op")
					b.ReportMetric(float64(clusterCPU(b, nodes)-r0)/float64(b.N), "redis-cpu-ns/op")
				}()
				b.RunParallel(func(pb *testing.PB) {
					var res [4]quota.Result
					i := 0
					for pb.Next() {
						if _, err := st.Take(ctx, bss[i%principals], res[:]); err != nil {
							b.Error(err)
							return
						}
						i += 7
					}
				})
			})
		}
	}
}

// BenchmarkTakeSpread is the control for the cluster's Redis CPU: the
// same 4-level takes, every level of a take in its tenant's slot (100
// principals a tenant, 100 tenants), decided by one redis-server, by three
// standalone redis-servers each holding a third of the tenants (a store
// each, the take routed by tenant, as a client-side shard would), and by a
// 3-master cluster (one store; the package's shared cluster, idle while
// benchmarks run, under a prefix of its own). The three shards do exactly
// the one-server work, split three ways, with no cluster at all, so their
// summed Redis CPU per take is what spreading the load over three
// processes costs on the machine that runs them; the cluster row is that
// plus what the cluster itself adds:
//
//	go test -run '^$' -bench BenchmarkTakeSpread -benchtime 2s ./tiers/redisstore/
func BenchmarkTakeSpread(b *testing.B) {
	one := redistest.Start(b)
	shards := []*redistest.Server{redistest.Start(b), redistest.Start(b), redistest.Start(b)}
	cl, prefix := redisstore.SharedCluster(b)
	store := func(c redis.UniversalClient, opts ...redisstore.Option) *redisstore.Store {
		s, err := redisstore.New(c, opts...)
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { _ = s.Close() })
		return s
	}
	l := quota.Limit{Algorithm: quota.TokenBucket, Rate: 1000, Period: time.Second, Burst: 1000}
	const principals = 10_000
	bss := make([][]quota.Bucket, principals)
	for p := range bss {
		bs := make([]quota.Bucket, 4)
		for i := range bs {
			bs[i] = quota.Bucket{Key: fmt.Sprintf("{t=%d}:l%d:u=%d", p/100, i, p), Limit: l, Cost: 1}
		}
		bss[p] = bs
	}
	for _, v := range []struct {
		name   string
		stores []*redisstore.Store
		nodes  []*redis.Client
	}{
		{"one-server", []*redisstore.Store{store(one.NewClient())}, []*redis.Client{one.Client()}},
		{"three-shards", []*redisstore.Store{store(shards[0].NewClient()), store(shards[1].NewClient()), store(shards[2].NewClient())},
			[]*redis.Client{shards[0].Client(), shards[1].Client(), shards[2].Client()}},
		{"cluster", []*redisstore.Store{store(cl, redisstore.WithPrefix(prefix))}, masters(b, cl)},
	} {
		b.Run(v.name, func(b *testing.B) {
			ctx := context.Background()
			b.ReportAllocs()
			b.SetParallelism(32)
			redisCPUs := func() (sum time.Duration) {
				for _, n := range v.nodes {
					sum += redisCPU(b, n)
				}
				return sum
			}
			cpu0, r0 := processCPU(), redisCPUs()
			b.RunParallel(func(pb *testing.PB) {
				var res [4]quota.Result
				i := 0
				for pb.Next() {
					p := i % principals
					if _, err := v.stores[(p/100)%len(v.stores)].Take(ctx, bss[p], res[:]); err != nil {
						b.Error(err)
						return
					}
					i += 7
				}
			})
			b.ReportMetric(float64(processCPU()-cpu0)/float64(b.N), "client-cpu-ns/op")
			b.ReportMetric(float64(redisCPUs()-r0)/float64(b.N), "redis-cpu-ns/op")
		})
	}
}

// BenchmarkSettle measures a one-bucket Settle, the cost a handler
// reports after the fact (floodgate.ReportCost), with 64 parallel callers
// on a local redis-server: unbatched (WithBatching(0, 0): a round trip
// each) and with the default batching (settlements join the flushers'
// pipelines with every other caller's calls). Costs alternate +1 and -1
// so the buckets neither drain nor fill; keys cycle over 10k principals.
func BenchmarkSettle(b *testing.B) {
	srv := redistest.Start(b)
	admin := srv.Client()
	plain, def := plainAndDefault(b, srv)
	l := quota.Limit{Algorithm: quota.TokenBucket, Rate: 1000, Period: time.Second, Burst: 1000}
	const principals = 10_000
	keys := make([]string, principals)
	for p := range keys {
		keys[p] = fmt.Sprintf("{u=%d}:settle", p)
	}
	for _, v := range []struct {
		name string
		st   *redisstore.Store
	}{{"parallel", plain}, {"parallel-default", def}} {
		st := v.st
		b.Run(v.name, func(b *testing.B) {
			ctx := context.Background()
			b.ReportAllocs()
			b.SetParallelism(32) // 64 callers on 2 CPUs
			cpu0, r0 := processCPU(), redisCPU(b, admin)
			b.RunParallel(func(pb *testing.PB) {
				var took [1]quota.Result
				bs := []quota.Bucket{{Limit: l}}
				i := 0
				for pb.Next() {
					bs[0].Key, bs[0].Cost = keys[i%principals], int64(1-2*(i/principals%2))
					if err := st.Settle(ctx, bs, took[:]); err != nil {
						b.Error(err)
						return
					}
					i += 7
				}
			})
			b.ReportMetric(float64(processCPU()-cpu0)/float64(b.N), "client-cpu-ns/op")
			b.ReportMetric(float64(redisCPU(b, admin)-r0)/float64(b.N), "redis-cpu-ns/op")
		})
	}
}
