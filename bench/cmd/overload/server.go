package main

import (
	"context"
	"crypto/sha256"
	"fmt"
	"io"
	"net"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"

	"github.com/floodgate-go/floodgate/bench/internal/child"
	"github.com/floodgate-go/floodgate/interceptor"
	"github.com/floodgate-go/floodgate/internal/testpb"
	"github.com/floodgate-go/floodgate/shedder"
	"github.com/floodgate-go/floodgate/shedder/cpu"
)

// serveFlag, as the first argument, makes the program the service under
// test: a child process of its own, so that its CPU (GOMAXPROCS, set by
// the parent) is not the load generator's.
const serveFlag = "-serve"

// serverConfig is what the parent gives the service.
type serverConfig struct {
	Variant   string        // "cpu" or "dep"
	Work      time.Duration // CPU burnt (cpu) or dependency time (dep) per call
	Wait      time.Duration // cpu: then waited, on I/O that is never the bottleneck
	Slots     int           // dep: the dependency's concurrency
	Capacity  int64         // the shedder's (initial) capacity; 0: no shedder
	Adaptive  bool
	Min, Max  int64   // adaptive bounds
	CPUTarget float64 // adaptive: 0 leaves the CPU signal out
	// BurnPerMs, when above 0, is the burn rounds of a millisecond (cpu),
	// measured once by the first service of a variant: every row then does
	// the same work per call, instead of each process calibrating anew at
	// a quieter or busier moment of a shared machine.
	BurnPerMs int
}

// serverStats is what the service prints when its stdin closes.
type serverStats struct {
	// Capacity is the shedder's capacity every 100ms from the start.
	Capacity []int64
	// Probes counts the windows an adaptive shedder spent probing.
	Probes int
	// BurnPerMs is the calibrated burn loop's iterations per millisecond.
	BurnPerMs int
	// Windows is, every 100ms, the adaptive shedder's last window:
	// "capacity latency/least throughput cpu overloaded", for -trace.
	Windows []string
}

// serve runs the service: it prints "ADDR host:port", serves until its
// stdin closes, then prints "STATS {json}" and returns.
func serve(args []string, stdin io.Reader, stdout io.Writer) error {
	var cfg serverConfig
	if err := child.Config("overload", args, &cfg); err != nil {
		return err
	}
	svc := &service{cfg: cfg}
	switch cfg.Variant {
	case "cpu":
		svc.perMs = cfg.BurnPerMs
		if svc.perMs <= 0 {
			svc.perMs = calibrate()
		}
		yieldEvery = max(1, svc.perMs/10)
	case "dep":
		svc.slots = make(chan struct{}, cfg.Slots)
	default:
		return fmt.Errorf("overload -serve: unknown variant %q", cfg.Variant)
	}
	var opts []grpc.ServerOption
	var shed *shedder.Shedder
	if cfg.Capacity > 0 {
		var sopts []shedder.Option
		if cfg.Adaptive {
			a := shedder.AdaptiveCapacity{Min: cfg.Min, Max: cfg.Max, CPUTarget: cfg.CPUTarget}
			if cfg.CPUTarget > 0 {
				m, err := cpu.New(cpu.WithScope(cpu.Process))
				if err != nil {
					return err
				}
				a.CPU = m
			}
			sopts = append(sopts, shedder.WithAdaptiveCapacity(a))
		}
		s, err := shedder.New(cfg.Capacity, sopts...)
		if err != nil {
			return err
		}
		shed = s
		fg, err := interceptor.New(interceptor.WithPriorityHeader(priorityHeader))
		if err != nil {
			return err
		}
		opts = append(opts, grpc.ChainUnaryInterceptor(fg.UnaryServer(s)))
	}
	srv := grpc.NewServer(opts...)
	testpb.RegisterEchoServer(srv, svc)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	go func() { _ = srv.Serve(lis) }()
	child.Listening(stdout, lis.Addr().String())

	var (
		mu    sync.Mutex
		stats = serverStats{BurnPerMs: svc.perMs}
		stop  = make(chan struct{})
		done  = make(chan struct{})
	)
	go func() {
		defer close(done)
		t := time.NewTicker(100 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-stop:
				return
			case <-t.C:
				if shed == nil {
					continue
				}
				st := shed.Stats()
				mu.Lock()
				stats.Capacity = append(stats.Capacity, st.Capacity)
				if st.Adaptive {
					o := ""
					if st.Overloaded {
						o = " OVER"
					}
					stats.Windows = append(stats.Windows, fmt.Sprintf("%d %.1f/%.1fms %.0f/s cpu %.2f%s", st.Capacity,
						float64(st.Latency)/1e6, float64(st.MinLatency)/1e6, st.Throughput, st.CPU, o))
				}
				if st.Probing {
					stats.Probes++
				}
				mu.Unlock()
			}
		}
	}()
	child.AwaitStop(stdin)
	close(stop)
	<-done
	srv.Stop()
	mu.Lock()
	defer mu.Unlock()
	return child.Report(stdout, stats)
}

// service is the Echo service under test: Plain does the work.
type service struct {
	testpb.UnimplementedEchoServer
	cfg   serverConfig
	perMs int           // cpu: burn iterations per millisecond
	slots chan struct{} // dep: the dependency's free slots
}

func (s *service) Plain(ctx context.Context, in *testpb.EchoRequest) (*testpb.EchoResponse, error) {
	switch s.cfg.Variant {
	case "cpu":
		burn(int(float64(s.perMs) * float64(s.cfg.Work) / float64(time.Millisecond)))
		if s.cfg.Wait > 0 {
			// I/O that is never the bottleneck: many calls wait at once.
			t := time.NewTimer(s.cfg.Wait)
			select {
			case <-t.C:
			case <-ctx.Done():
				t.Stop()
				return nil, ctx.Err()
			}
		}
	case "dep":
		// The dependency: at most Slots calls at once, each taking Work;
		// the rest wait in line (a connection pool).
		select {
		case s.slots <- struct{}{}:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		t := time.NewTimer(s.cfg.Work)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			<-s.slots
			return nil, ctx.Err()
		}
		<-s.slots
	}
	if err := ctx.Err(); err != nil {
		return nil, err // the caller gave up: the work was wasted
	}
	return &testpb.EchoResponse{Message: in.GetMessage()}, nil
}

// burnt keeps the burn loop's result alive, so the compiler cannot drop
// the work.
var burnt atomic.Uint64

// burn spends CPU: n rounds of SHA-256 over 32 bytes, yielding the
// processor every yieldEvery rounds (set by calibrate to about 100µs), as
// a handler that allocates, locks or does I/O does. A handler that never
// yields holds its P: on a one-core process the request reader then waits
// for it, requests queue in the Go run queue before any interceptor sees
// them, and no admission control inside the process can shed them.
func burn(n int) {
	var b [32]byte
	for i := range n {
		b = sha256.Sum256(b[:])
		if yieldEvery > 0 && i%yieldEvery == yieldEvery-1 { // set before the first call
			runtime.Gosched()
		}
	}
	burnt.Add(uint64(b[0]))
}

// yieldEvery is how many burn rounds make about 100µs.
var yieldEvery int

// calibrate returns how many burn rounds take a millisecond of this
// process's CPU when it runs alone: the fastest of several tries.
func calibrate() int {
	const rounds = 20000
	best := time.Duration(1 << 62)
	for range 5 {
		runtime.Gosched()
		start := time.Now()
		burn(rounds)
		best = min(best, time.Since(start))
	}
	return max(1, int(float64(rounds)*float64(time.Millisecond)/float64(best)))
}
