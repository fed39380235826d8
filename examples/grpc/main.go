// Command grpc is the example shop as a gRPC service (internal/shoppb)
// protected by the whole floodgate chain, one interceptor per stage: the
// priority load shedder, the in-flight limiter and the hierarchical rate
// limits of policy.yaml (hot-reloaded), kept in process or, when REDIS_URL is
// set, in Redis behind a circuit breaker. The gRPC health service is never
// limited. Decisions are traced and counted with OpenTelemetry and exposed for
// Prometheus over HTTP.
//
//	cd examples && go run ./grpc
//	go run ./client    # in another terminal
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"

	"go.opentelemetry.io/contrib/instrumentation/google.golang.org/grpc/otelgrpc"
	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/floodgate-go/floodgate/examples/internal/stack"
	"github.com/floodgate-go/floodgate/interceptor"
	"github.com/floodgate-go/floodgate/internal/shoppb"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stdout); errors.Is(err, flag.ErrHelp) {
		os.Exit(2)
	} else if err != nil {
		fmt.Fprintln(os.Stderr, "grpc example:", err)
		os.Exit(1)
	}
}

// run serves the Shop service until ctx ends.
func run(ctx context.Context, args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("grpc", flag.ContinueOnError)
	fs.SetOutput(stdout)
	addr := fs.String("addr", "127.0.0.1:9090", "address the gRPC service listens on")
	metricsAddr := fs.String("metrics-addr", "127.0.0.1:9465", "address of the Prometheus /metrics endpoint")
	policyPath := fs.String("policy", "policy.yaml", "rate-limit policy, reloaded when it changes")
	redisURL := fs.String("redis", os.Getenv("REDIS_URL"), "Redis URL for limits shared by every instance (default $REDIS_URL; empty: in process)")
	trace := fs.Bool("trace", false, "print every span (with its floodgate.* attributes) as JSON")
	work := fs.Duration("work", 10*time.Millisecond, "simulated work per call")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	logger := slog.New(slog.NewTextHandler(stdout, nil))
	cfg := stack.Config{PolicyPath: *policyPath, RedisURL: *redisURL, Logger: logger}
	if *trace {
		cfg.Traces = stdout
	}
	st, err := stack.New(ctx, cfg)
	if err != nil {
		return err
	}
	defer st.Close(context.Background())

	// One Interceptor makes every stage's interceptor, so they share one
	// floodgate.Request (the first builds it) and the policy's methods:
	// (cost and priority, then the proto annotations). Identity: an auth
	// proxy in front sets these metadata keys and strips them from client
	// calls.
	fg, err := interceptor.New(
		interceptor.WithUser(interceptor.FromHeader("x-user")),
		interceptor.WithTenant(interceptor.FromHeader("x-tenant")),
		interceptor.WithTier(interceptor.FromHeader("x-tier")),
		interceptor.WithDomain("shop.example.com"), // google.rpc.ErrorInfo domain
		interceptor.WithObserver(st.Observer),      // spans and metrics
	)
	if err != nil {
		return err
	}
	srv := grpc.NewServer(
		grpc.StatsHandler(otelgrpc.NewServerHandler(
			otelgrpc.WithMeterProvider(st.MeterProvider), otelgrpc.WithTracerProvider(st.TracerProvider))),
		grpc.ChainUnaryInterceptor(
			fg.UnaryServer(st.Shed),   // 1. shed low priorities near capacity
			fg.UnaryServer(st.Conc),   // 2. cap requests in flight
			fg.UnaryServer(st.Limits), // 3. the policy's rate limits
		),
		grpc.ChainStreamInterceptor(fg.StreamServer(st.Shed), fg.StreamServer(st.Conc), fg.StreamServer(st.Limits)),
	)
	shoppb.RegisterShopServer(srv, shop{work: *work})
	healthpb.RegisterHealthServer(srv, health.NewServer()) // /grpc.health.v1.Health/* is never limited

	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		return err
	}
	metrics, stopMetrics, err := stack.ServeMetrics(*metricsAddr, st.Metrics)
	if err != nil {
		ln.Close()
		return err
	}
	defer stopMetrics()
	fmt.Fprintf(stdout, "grpc example listening on %s\n", ln.Addr())
	fmt.Fprintf(stdout, "  metrics: http://%s/metrics\n  store:   %s\n  policy:  %s (reloaded on change)\n",
		metrics, st.StoreName, *policyPath)

	watchCtx, stopWatch := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Go(func() { st.WatchPolicy(watchCtx) })
	defer wg.Wait()
	defer stopWatch()

	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	stopped := make(chan struct{})
	go func() { srv.GracefulStop(); close(stopped) }()
	select {
	case <-stopped:
	case <-time.After(5 * time.Second):
		srv.Stop()
	}
	if err := <-errc; err != nil && !errors.Is(err, grpc.ErrServerStopped) {
		return err
	}
	return nil
}
