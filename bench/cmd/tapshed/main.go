// Command tapshed measures what refusing a gRPC call costs the server:
// a flood of unary calls with large request messages (64 KiB by default)
// to a service whose shedder sheds every one of them (its one slot is
// held by a critical call), with the shedder in the unary interceptor
// (the message read and decoded, a handler goroutine started, then the
// refusal) and at grpc-go's tap (interceptor.TapHandle: refused when the
// headers arrive). Each service runs in a process of its own
// (bench/internal/child); its CPU time (getrusage) is read before and
// after each measured flood, and the rows of the two placements
// alternate in one run.
//
//	go run ./cmd/tapshed -calls 20000 -rounds 3
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"runtime/pprof"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/emptypb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/bench/internal/child"
	"github.com/floodgate-go/floodgate/interceptor"
	"github.com/floodgate-go/floodgate/internal/testpb"
	"github.com/floodgate-go/floodgate/shedder"
)

const serveFlag = "-serve"

// cpuMethod answers the service process's CPU time so far, in
// nanoseconds; the interceptors skip it.
const cpuMethod = "/tapshed.v1.Stats/CPU"

func main() {
	child.ServeIfAsked(serveFlag, serve)
	if err := run(os.Args, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

// serverConfig is the service process's configuration.
type serverConfig struct {
	Tap     bool   // the shedder at the tap, not in the interceptor
	Profile string // a file for the CPU profile of the whole process, or ""
}

// serverStats is what the service reports when it stops.
type serverStats struct {
	Handled int64 // calls that reached the handler
}

type echo struct {
	testpb.UnimplementedEchoServer
	handled *int64
	mu      *sync.Mutex
}

func (e echo) Plain(_ context.Context, in *testpb.EchoRequest) (*testpb.EchoResponse, error) {
	e.mu.Lock()
	*e.handled++
	e.mu.Unlock()
	return &testpb.EchoResponse{}, nil
}

func cpuNanos() int64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return -1
	}
	return ru.Utime.Nano() + ru.Stime.Nano()
}

func serve(args []string, in io.Reader, out io.Writer) error {
	var cfg serverConfig
	if err := child.Config("tapshed", args, &cfg); err != nil {
		return err
	}
	if cfg.Profile != "" {
		f, err := os.Create(cfg.Profile)
		if err != nil {
			return err
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
		defer func() { pprof.StopCPUProfile(); _ = f.Close() }()
	}
	shed, err := shedder.New(1)
	if err != nil {
		return err
	}
	// The one slot, held by a critical call for the whole run: every
	// other call is shed.
	if d, _, err := shed.Admit(context.Background(), &floodgate.Request{Method: "/hold", Priority: floodgate.PriorityCritical}); err != nil || !d.Allowed {
		return fmt.Errorf("holding the slot: %v %v", d, err)
	}
	fg, err := interceptor.New(interceptor.WithSkip(func(m string) bool { return m == cpuMethod }))
	if err != nil {
		return err
	}
	opts := []grpc.ServerOption{grpc.ChainUnaryInterceptor(fg.UnaryServer(shed))}
	if cfg.Tap {
		opts = append(opts, grpc.InTapHandle(fg.TapHandle(shed)))
	}
	srv := grpc.NewServer(opts...)
	var (
		mu      sync.Mutex
		handled int64
	)
	testpb.RegisterEchoServer(srv, echo{handled: &handled, mu: &mu})
	srv.RegisterService(&grpc.ServiceDesc{
		ServiceName: "tapshed.v1.Stats",
		HandlerType: (*any)(nil),
		Methods: []grpc.MethodDesc{{MethodName: "CPU", Handler: func(_ any, ctx context.Context, dec func(any) error, _ grpc.UnaryServerInterceptor) (any, error) {
			if err := dec(new(emptypb.Empty)); err != nil {
				return nil, err
			}
			return wrapperspb.Int64(cpuNanos()), nil
		}}},
	}, struct{}{})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	go func() { _ = srv.Serve(ln) }()
	child.Listening(out, ln.Addr().String())
	child.AwaitStop(in)
	srv.Stop()
	mu.Lock()
	st := serverStats{Handled: handled}
	mu.Unlock()
	return child.Report(out, st)
}

// options are the program's flags.
type options struct {
	calls, rounds, conc, size, procs int
	profile                          string
}

func run(args []string, out io.Writer) error {
	fs := flag.NewFlagSet(args[0], flag.ContinueOnError)
	fs.SetOutput(out)
	var o options
	fs.IntVar(&o.calls, "calls", 20000, "refused calls per row")
	fs.IntVar(&o.rounds, "rounds", 3, "rounds; each round measures both placements, alternating")
	fs.IntVar(&o.conc, "conc", 32, "calls in flight from the client")
	fs.IntVar(&o.size, "size", 64<<10, "request message size, bytes")
	fs.IntVar(&o.procs, "server-procs", 1, "GOMAXPROCS of each service process")
	fs.StringVar(&o.profile, "cpuprofile", "", "write each service's CPU profile to PREFIX-interceptor.pprof and PREFIX-tap.pprof")
	if err := fs.Parse(args[1:]); err != nil {
		return err
	}
	if o.calls < 1 || o.rounds < 1 || o.conc < 1 || o.size < 0 || o.procs < 1 {
		return fmt.Errorf("tapshed: -calls, -rounds, -conc and -server-procs must be positive, -size not negative")
	}
	ctx := context.Background()
	type svc struct {
		name string
		proc *child.Child
		cc   *grpc.ClientConn
	}
	var svcs []*svc
	defer func() {
		for _, s := range svcs {
			_ = s.cc.Close()
			var st serverStats
			if err := s.proc.Stop(&st); err != nil {
				fmt.Fprintln(os.Stderr, err)
			} else if st.Handled != 0 {
				fmt.Fprintf(out, "%s: %d calls reached the handler (want 0)\n", s.name, st.Handled)
			}
		}
	}()
	for _, tap := range []bool{false, true} {
		cfg := serverConfig{Tap: tap}
		name := "interceptor"
		if tap {
			name = "tap"
		}
		if o.profile != "" {
			cfg.Profile = o.profile + "-" + name + ".pprof"
		}
		p, err := child.Start(ctx, "tapshed", serveFlag, cfg, "GOMAXPROCS="+strconv.Itoa(o.procs))
		if err != nil {
			return err
		}
		cc, err := grpc.NewClient(p.Addr, grpc.WithTransportCredentials(insecure.NewCredentials()), grpc.WithDisableRetry())
		if err != nil {
			var st serverStats
			_ = p.Stop(&st)
			return err
		}
		svcs = append(svcs, &svc{name: name, proc: p, cc: cc})
	}
	msg := &testpb.EchoRequest{Message: strings.Repeat("x", o.size)}
	// Warm up both services: connections, buffers.
	for _, s := range svcs {
		if _, err := flood(ctx, s.cc, msg, min(o.calls, 2000), o.conc); err != nil {
			return err
		}
	}
	fmt.Fprintf(out, "tapshed: %d refused calls per row, %d KiB messages, %d in flight, server GOMAXPROCS %d\n",
		o.calls, o.size>>10, o.conc, o.procs)
	fmt.Fprintf(out, "%-5s %-12s %12s %14s %12s\n", "round", "shedder", "calls/s", "server CPU/call", "server CPU")
	sums := map[string]float64{}
	for r := 1; r <= o.rounds; r++ {
		order := svcs
		if r%2 == 0 { // alternate which placement goes first
			order = []*svc{svcs[1], svcs[0]}
		}
		for _, s := range order {
			c0, err := cpuOf(ctx, s.cc)
			if err != nil {
				return err
			}
			el, err := flood(ctx, s.cc, msg, o.calls, o.conc)
			if err != nil {
				return err
			}
			c1, err := cpuOf(ctx, s.cc)
			if err != nil {
				return err
			}
			cpu := time.Duration(c1 - c0)
			per := float64(cpu) / float64(o.calls)
			sums[s.name] += per
			fmt.Fprintf(out, "%-5d %-12s %12.0f %12.1fµs %12v\n", r, s.name,
				float64(o.calls)/el.Seconds(), per/1e3, cpu.Round(time.Millisecond))
		}
	}
	ic, tp := sums["interceptor"]/float64(o.rounds), sums["tap"]/float64(o.rounds)
	fmt.Fprintf(out, "mean server CPU per refused call: interceptor %.1fµs, tap %.1fµs: tap/interceptor = %.2f\n",
		ic/1e3, tp/1e3, tp/ic)
	return nil
}

// cpuOf asks a service for its CPU time so far.
func cpuOf(ctx context.Context, cc *grpc.ClientConn) (int64, error) {
	var v wrapperspb.Int64Value
	if err := cc.Invoke(ctx, cpuMethod, &emptypb.Empty{}, &v); err != nil {
		return 0, fmt.Errorf("tapshed: reading the service's CPU: %w", err)
	}
	return v.GetValue(), nil
}

// flood sends n calls, conc at a time, and checks every one is shed.
func flood(ctx context.Context, cc *grpc.ClientConn, msg *testpb.EchoRequest, n, conc int) (time.Duration, error) {
	c := testpb.NewEchoClient(cc)
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		ferr error
	)
	next := make(chan struct{}, n)
	for range n {
		next <- struct{}{}
	}
	close(next)
	start := time.Now()
	for range conc {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range next {
				_, err := c.Plain(ctx, msg)
				if status.Code(err) != codes.Unavailable {
					mu.Lock()
					if ferr == nil {
						ferr = fmt.Errorf("tapshed: a call was not shed: %v", err)
					}
					mu.Unlock()
					return
				}
			}
		}()
	}
	wg.Wait()
	return time.Since(start), ferr
}
