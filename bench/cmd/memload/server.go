package main

import (
	"context"
	"io"
	"net"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"slices"
	"sync"
	"time"

	"google.golang.org/grpc"

	"github.com/floodgate-go/floodgate/bench/internal/child"
	"github.com/floodgate-go/floodgate/interceptor"
	"github.com/floodgate-go/floodgate/internal/testpb"
	"github.com/floodgate-go/floodgate/shedder"
	"github.com/floodgate-go/floodgate/shedder/cpu"
	"github.com/floodgate-go/floodgate/shedder/mem"
)

// serveFlag, as the first argument, makes the program the service under
// test: a child process of its own, with the GOMEMLIMIT the parent sets.
const serveFlag = "-serve"

// serverConfig is what the parent gives the service.
type serverConfig struct {
	Buffer       int           // bytes each call allocates and holds
	Hold         time.Duration // how long each call holds its buffer
	Min, Max     int64         // the adaptive capacity's bounds
	CPUTarget    float64       // 0 leaves the CPU signal out
	MemoryTarget float64       // 0 leaves the memory signal out
	Warmup       time.Duration // from ADDR: not sampled
}

// serverStats is what the service prints when its stdin closes.
type serverStats struct {
	Limit     int64     // GOMEMLIMIT, bytes
	Mem       []int64   // every 10ms after Warmup: total less released (what GOMEMLIMIT bounds)
	Live      []int64   // every 10ms after Warmup: the live heap of the last collection
	GCShare   float64   // GC CPU over all of the process's CPU, after Warmup
	Capacity  []int64   // every 100ms after Warmup
	Source    string    // the memory meter's, when it has one
	MemShares []float64 // Stats.Memory every 100ms after Warmup
}

// serve runs the service: it prints "ADDR host:port", serves until its
// stdin closes, then prints "STATS {json}" and returns.
func serve(args []string, stdin io.Reader, stdout io.Writer) error {
	var cfg serverConfig
	if err := child.Config("memload", args, &cfg); err != nil {
		return err
	}
	a := shedder.AdaptiveCapacity{Min: cfg.Min, Max: cfg.Max, CPUTarget: cfg.CPUTarget, MemoryTarget: cfg.MemoryTarget}
	var stats serverStats
	if cfg.CPUTarget > 0 {
		m, err := cpu.New(cpu.WithScope(cpu.Process))
		if err != nil {
			return err
		}
		a.CPU = m
	}
	if cfg.MemoryTarget > 0 {
		m, err := mem.New()
		if err != nil {
			return err
		}
		a.Memory, stats.Source = m, m.Source()
	}
	shed, err := shedder.New(cfg.Min, shedder.WithAdaptiveCapacity(a))
	if err != nil {
		return err
	}
	fg, err := interceptor.New()
	if err != nil {
		return err
	}
	srv := grpc.NewServer(grpc.ChainUnaryInterceptor(fg.UnaryServer(shed)))
	testpb.RegisterEchoServer(srv, &service{cfg: cfg})
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	go func() { _ = srv.Serve(lis) }()
	child.Listening(stdout, lis.Addr().String())
	stats.Limit = debug.SetMemoryLimit(-1)

	var (
		mu   sync.Mutex
		stop = make(chan struct{})
		done = make(chan struct{})
	)
	go func() {
		defer close(done)
		s := []metrics.Sample{
			{Name: "/memory/classes/total:bytes"},
			{Name: "/memory/classes/heap/released:bytes"},
			{Name: "/gc/heap/live:bytes"},
			{Name: "/cpu/classes/gc/total:cpu-seconds"},
			{Name: "/cpu/classes/total:cpu-seconds"},
		}
		start := time.Now()
		t := time.NewTicker(10 * time.Millisecond)
		defer t.Stop()
		var gc0, all0 float64
		measuring := false
		for n := 0; ; n++ {
			select {
			case <-stop:
				metrics.Read(s)
				mu.Lock()
				if all := s[4].Value.Float64() - all0; measuring && all > 0 {
					stats.GCShare = (s[3].Value.Float64() - gc0) / all
				}
				mu.Unlock()
				return
			case <-t.C:
			}
			metrics.Read(s)
			if !measuring {
				if time.Since(start) < cfg.Warmup {
					continue
				}
				measuring, n = true, 0
				gc0, all0 = s[3].Value.Float64(), s[4].Value.Float64()
			}
			mu.Lock()
			stats.Mem = append(stats.Mem, int64(s[0].Value.Uint64()-s[1].Value.Uint64()))
			stats.Live = append(stats.Live, int64(s[2].Value.Uint64()))
			if n%10 == 0 {
				st := shed.Stats()
				stats.Capacity = append(stats.Capacity, st.Capacity)
				stats.MemShares = append(stats.MemShares, st.Memory)
			}
			mu.Unlock()
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

// service is the Echo service under test: Plain allocates a buffer,
// writes every page of it (so it is memory the process holds, not an
// untouched mapping), and holds it for Hold, as a handler that reads a
// request body or builds a response in memory does.
type service struct {
	testpb.UnimplementedEchoServer
	cfg serverConfig
}

func (s *service) Plain(ctx context.Context, in *testpb.EchoRequest) (*testpb.EchoResponse, error) {
	buf := make([]byte, s.cfg.Buffer)
	for i := 0; i < len(buf); i += 4096 {
		buf[i] = 1
	}
	t := time.NewTimer(s.cfg.Hold)
	select {
	case <-t.C:
	case <-ctx.Done():
		t.Stop()
		return nil, ctx.Err()
	}
	runtime.KeepAlive(buf)
	return &testpb.EchoResponse{Message: in.GetMessage()}, nil
}

// quantile returns the q-quantile of v (nearest rank), 0 for none.
func quantile(v []int64, q float64) int64 {
	if len(v) == 0 {
		return 0
	}
	s := slices.Clone(v)
	slices.Sort(s)
	i := int(q*float64(len(s))+0.5) - 1
	return s[min(max(i, 0), len(s)-1)]
}
