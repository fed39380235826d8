package harness

import (
	"context"
	"fmt"
	"math/rand/v2"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// Op performs one operation for the principal numbered k (0 <= k < Keys)
// and reports whether it was allowed. ctx ends shortly after the phase's
// duration; operations must honour it so a hung call cannot stall the run. Each worker goroutine gets its own Op
// from the factory passed to Run, so an Op may keep per-worker scratch space.
type Op func(ctx context.Context, k int) (allowed bool, err error)

// Load describes the closed-loop workload: Concurrency goroutines each run
// operations back to back on principals drawn uniformly at random (a seeded
// PCG stream per goroutine) from Keys.
type Load struct {
	// Concurrency is the number of goroutines, each with one operation in
	// flight.
	Concurrency int
	// Keys is the number of distinct principals.
	Keys int
	// Warmup is how long to run before measuring (nothing is recorded).
	Warmup time.Duration
	// Duration bounds the measured phase.
	Duration time.Duration
	// MaxOps bounds the number of operations of the measured phase (and of
	// the warm-up); the phase ends at whichever bound comes first.
	MaxOps int64
	// Seed seeds the key streams.
	Seed uint64
}

// Validate reports what is wrong with l, or nil.
func (l Load) Validate() error {
	switch {
	case l.Concurrency < 1 || l.Concurrency > 100_000:
		return fmt.Errorf("concurrency %d is out of range [1, 100000]", l.Concurrency)
	case l.Keys < 1 || l.Keys > 100_000_000:
		return fmt.Errorf("keys %d is out of range [1, 100000000]", l.Keys)
	case l.Duration <= 0 || l.Duration > time.Hour:
		return fmt.Errorf("duration %s is out of range (0, 1h]", l.Duration)
	case l.Warmup < 0 || l.Warmup > time.Hour:
		return fmt.Errorf("warmup %s is out of range [0, 1h]", l.Warmup)
	case l.MaxOps < int64(l.Concurrency):
		return fmt.Errorf("max ops %d is below the concurrency %d", l.MaxOps, l.Concurrency)
	}
	return nil
}

// Probe names what Run reads before and after the measured phase.
type Probe struct {
	// Counters are the go-redis hooks on every client the contender uses;
	// their round trips and commands are summed.
	Counters []*Counter
	// Redis, when set, is an admin client of the server under test, used
	// to read the server's CPU time (INFO cpu).
	Redis *redis.Client
	// RedisNodes, when set, are admin clients of the masters of the
	// Redis Cluster under test: their CPU times are summed into
	// Stats.RedisCPU and kept per node in Stats.RedisNodeCPU.
	RedisNodes []*redis.Client
	// Drain, when set, runs after the measured phase and before the
	// counters and the server's CPU are read: a contender that defers
	// store work (local-first reports) sends it there, so the Redis work
	// its measured calls caused is counted in full, never pushed past the
	// window. Its time is not in Elapsed.
	Drain func(context.Context) error
	// Settle, when set, runs after the warm-up and before the counters
	// and the server's CPU are first read: a contender that defers store
	// work sends what the warm-up's calls caused, so that it is not
	// counted against the measured calls.
	Settle func(context.Context) error
}

// Stats is what one measured phase produced.
type Stats struct {
	// Ops is the number of operations that returned without error.
	Ops uint64
	// Allowed is how many of Ops were allowed.
	Allowed uint64
	// Errors is the number of operations that returned an error; FirstErr
	// is the first of them.
	Errors   uint64
	FirstErr error
	// Elapsed is the wall time of the measured phase.
	Elapsed time.Duration
	// Rounds is the number of phases added together (Add); Best is the
	// highest throughput (operations per second) of any one of them.
	Rounds int
	Best   float64
	// Latency holds the latency of every successful operation.
	Latency *Histogram
	// Mallocs is the number of heap objects the process allocated.
	Mallocs uint64
	// CPU is the process's user+system CPU time; CPUKnown is false where
	// the platform cannot tell.
	CPU      time.Duration
	CPUKnown bool
	// RoundTrips, Commands and Writes are the Counters' totals.
	RoundTrips, Commands, Writes uint64
	// RedisCPU is the server's CPU time; RedisCPUKnown is false without
	// Probe.Redis.
	RedisCPU      time.Duration
	RedisCPUKnown bool
	// RedisNodeCPU is each cluster node's CPU time (Probe.RedisNodes).
	RedisNodeCPU []time.Duration
}

// PerSecond is Ops per second of Elapsed.
func (s Stats) PerSecond() float64 {
	if s.Elapsed <= 0 {
		return 0
	}
	return float64(s.Ops) / s.Elapsed.Seconds()
}

// Per divides v by Ops (0 when there were none).
func (s Stats) Per(v float64) float64 {
	if s.Ops == 0 {
		return 0
	}
	return v / float64(s.Ops)
}

// Add accumulates o into s, for a contender measured over several rounds:
// counts, times and costs add up, latencies merge, the first error stays.
func (s *Stats) Add(o Stats) {
	if s.Latency == nil { // the first round
		s.Latency = &Histogram{}
		s.CPUKnown, s.RedisCPUKnown = o.CPUKnown, o.RedisCPUKnown
	} else {
		s.CPUKnown = s.CPUKnown && o.CPUKnown
		s.RedisCPUKnown = s.RedisCPUKnown && o.RedisCPUKnown
	}
	s.Ops += o.Ops
	s.Allowed += o.Allowed
	s.Errors += o.Errors
	if s.FirstErr == nil {
		s.FirstErr = o.FirstErr
	}
	s.Elapsed += o.Elapsed
	s.Rounds++
	s.Best = max(s.Best, o.PerSecond())
	if o.Latency != nil {
		s.Latency.Merge(o.Latency)
	}
	s.Mallocs += o.Mallocs
	s.CPU += o.CPU
	s.RoundTrips += o.RoundTrips
	s.Commands += o.Commands
	s.Writes += o.Writes
	s.RedisCPU += o.RedisCPU
	if s.RedisNodeCPU == nil && o.RedisNodeCPU != nil {
		s.RedisNodeCPU = make([]time.Duration, len(o.RedisNodeCPU))
	}
	for i := range min(len(s.RedisNodeCPU), len(o.RedisNodeCPU)) {
		s.RedisNodeCPU[i] += o.RedisNodeCPU[i]
	}
}

// Run warms up, then measures one phase of load. newOp is called once per
// goroutine before any operation starts. Run returns an error only when it
// could not measure (bad Load, cancelled context, a probe that failed);
// failed operations are counted in Stats.Errors.
func Run(ctx context.Context, load Load, newOp func() Op, probe Probe) (Stats, error) {
	if err := load.Validate(); err != nil {
		return Stats{}, err
	}
	ops := make([]Op, load.Concurrency)
	for i := range ops {
		ops[i] = newOp()
	}
	workers := make([]worker, load.Concurrency)
	if load.Warmup > 0 {
		phase(ctx, load, ops, workers, load.Warmup, load.Seed^0x9e3779b97f4a7c15)
		if err := ctx.Err(); err != nil {
			return Stats{}, err
		}
	}
	if probe.Settle != nil {
		if err := probe.Settle(ctx); err != nil {
			return Stats{}, fmt.Errorf("settling after the warm-up: %w", err)
		}
	}
	for i := range workers {
		workers[i] = worker{}
	}

	var st Stats
	var before, after runtime.MemStats
	var rcpu0 time.Duration
	if probe.Redis != nil {
		v, err := RedisCPU(ctx, probe.Redis)
		if err != nil {
			return Stats{}, fmt.Errorf("reading Redis CPU: %w", err)
		}
		rcpu0 = v
	}
	var ncpu0 []time.Duration
	if probe.RedisNodes != nil {
		v, err := nodesCPU(ctx, probe.RedisNodes)
		if err != nil {
			return Stats{}, fmt.Errorf("reading Redis CPU: %w", err)
		}
		ncpu0 = v
	}
	rt0, cmd0, w0 := sumCounters(probe.Counters)
	runtime.GC()
	runtime.ReadMemStats(&before)
	cpu0, cpuOK := ProcessCPU()

	st.Elapsed = phase(ctx, load, ops, workers, load.Duration, load.Seed)

	if probe.Drain != nil {
		if err := probe.Drain(ctx); err != nil {
			return Stats{}, fmt.Errorf("draining after the measured phase: %w", err)
		}
	}
	cpu1, cpuOK1 := ProcessCPU()
	runtime.ReadMemStats(&after)
	rt1, cmd1, w1 := sumCounters(probe.Counters)
	if err := ctx.Err(); err != nil {
		return Stats{}, err
	}
	if probe.Redis != nil {
		v, err := RedisCPU(ctx, probe.Redis)
		if err != nil {
			return Stats{}, fmt.Errorf("reading Redis CPU: %w", err)
		}
		st.RedisCPU, st.RedisCPUKnown = v-rcpu0, true
	}
	if probe.RedisNodes != nil {
		v, err := nodesCPU(ctx, probe.RedisNodes)
		if err != nil {
			return Stats{}, fmt.Errorf("reading Redis CPU: %w", err)
		}
		st.RedisNodeCPU = make([]time.Duration, len(v))
		for i := range v {
			st.RedisNodeCPU[i] = v[i] - ncpu0[i]
			st.RedisCPU += st.RedisNodeCPU[i]
		}
		st.RedisCPUKnown = true
	}
	st.Mallocs = after.Mallocs - before.Mallocs
	st.CPU, st.CPUKnown = cpu1-cpu0, cpuOK && cpuOK1
	st.RoundTrips, st.Commands, st.Writes = rt1-rt0, cmd1-cmd0, w1-w0
	st.Latency = &Histogram{}
	for i := range workers {
		w := &workers[i]
		st.Ops += w.ops
		st.Allowed += w.allowed
		st.Errors += w.errors
		if st.FirstErr == nil {
			st.FirstErr = w.firstErr
		}
		st.Latency.Merge(&w.hist)
	}
	return st, nil
}

func sumCounters(cs []*Counter) (rt, cmds, writes uint64) {
	for _, c := range cs {
		rt += c.RoundTrips()
		cmds += c.Commands()
		writes += c.Writes()
	}
	return rt, cmds, writes
}

// stragglerGrace bounds how long an operation may run past its phase.
const stragglerGrace = 30 * time.Second

type worker struct {
	hist     Histogram
	ops      uint64
	allowed  uint64
	errors   uint64
	firstErr error
}

// phase runs ops until d passes, the budget is spent or ctx ends, and
// returns the wall time from start to the last worker's exit.
func phase(ctx context.Context, load Load, ops []Op, workers []worker, d time.Duration, seed uint64) time.Duration {
	// Operations get a context that ends stragglerGrace after the phase
	// should have ended, so one that hangs (a paused server, a lost reply)
	// cannot hold the run forever.
	ctx, cancel := context.WithTimeout(ctx, d+stragglerGrace)
	defer cancel()
	var stop atomic.Bool
	perWorker := uint64(load.MaxOps) / uint64(len(ops))
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range ops {
		wg.Add(1)
		go func(w *worker, op Op, stream uint64) {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(seed, stream))
			<-start
			for n := uint64(0); n < perWorker && !stop.Load(); n++ {
				k := rng.IntN(load.Keys)
				t0 := time.Now()
				allowed, err := op(ctx, k)
				lat := time.Since(t0)
				if err != nil {
					if w.errors == 0 {
						w.firstErr = err
					}
					w.errors++
					if ctx.Err() != nil {
						return
					}
					continue
				}
				w.ops++
				if allowed {
					w.allowed++
				}
				w.hist.Record(lat)
			}
		}(&workers[i], ops[i], uint64(i))
	}
	// t0 before the timer starts, so the measured phase is never shorter
	// than d.
	t0 := time.Now()
	timer := time.AfterFunc(d, func() { stop.Store(true) })
	defer timer.Stop()
	stopOnCancel := context.AfterFunc(ctx, func() { stop.Store(true) })
	defer stopOnCancel()
	close(start)
	wg.Wait()
	return time.Since(t0)
}
