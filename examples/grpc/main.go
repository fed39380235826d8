// Command grpc is the example shop as a gRPC service (internal/shoppb)
// protected by the whole floodgate chain, one interceptor per stage: the
// priority load shedder, the in-flight limiter and the hierarchical rate
// limits of policy.yaml (hot-reloaded), kept in process or, when REDIS_URL is
// set, in Redis behind a circuit breaker. The gRPC health service is never
// limited. Decisions are traced and counted with OpenTelemetry and exposed for
// Prometheus over HTTP. The stages run inside go-grpc-middleware v2's
// logging, realip, selector and recovery interceptors (package grpcmw): each
// call's log line carries floodgate's decision, the client behind
// -trusted-proxies is limited by its own address, and -unlimited methods
// are never limited. With -adaptive the shedder's capacity follows the
// service and an adaptive in-flight limit joins the chain.
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

	"github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors/logging"
	"github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors/realip"
	"github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors/recovery"
	"github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors/selector"
	"go.opentelemetry.io/contrib/instrumentation/google.golang.org/grpc/otelgrpc"
	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/reflection"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/examples/internal/stack"
	"github.com/floodgate-go/floodgate/grpcmw"
	"github.com/floodgate-go/floodgate/interceptor"
	"github.com/floodgate-go/floodgate/internal/shoppb"
	floodgatev1 "github.com/floodgate-go/floodgate/proto/floodgate/v1"
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
	trustedProxies := fs.String("trusted-proxies", "", "comma-separated CIDRs of proxies whose X-Forwarded-For names the client (realip)")
	unlimited := fs.String("unlimited", reflectionServices, "comma-separated methods (/pkg.Svc/Method or /pkg.Svc/*) floodgate never sees (selector)")
	adaptive := fs.Bool("adaptive", false, "adaptive overload control: the shedder's capacity follows the service instead of a fixed 64, and an adaptive in-flight limit (Gradient2) joins the chain")
	cpuTarget := fs.Float64("cpu-target", 0.9, "with -adaptive: the share of the container's CPU (its quota, else its CPUs) at which the shedder counts the service overloaded; 0 decides on latency alone")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	logger := slog.New(slog.NewTextHandler(stdout, nil))
	mw, err := newMiddleware(logger, *trustedProxies, *unlimited)
	if err != nil {
		return err
	}
	cfg := stack.Config{PolicyPath: *policyPath, RedisURL: *redisURL, Service: "shop-grpc", Logger: logger}
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
		grpcmw.WithRealIP(),    // limit the client realip resolved
		grpcmw.WithLogFields(), // floodgate.* fields on each call's log line
		// The user of Login is the account it submits (LoginRequest.user,
		// marked floodgate.v1.identity in shop.proto), so the login limits
		// follow the account guessed whatever x-user says; other calls'
		// user is x-user, from the auth proxy.
		interceptor.WithUser(interceptor.FirstOf(
			interceptor.FromProtoField(floodgatev1.Identity_IDENTITY_USER),
			interceptor.FromHeader("x-user"),
		)),
		interceptor.WithTenant(interceptor.FromHeader("x-tenant")),
		interceptor.WithTier(interceptor.FromHeader("x-tier")),
		interceptor.WithDomain("shop.example.com"), // google.rpc.ErrorInfo domain
		interceptor.WithObserver(st.Observer),      // spans and metrics
	)
	if err != nil {
		return err
	}
	// -adaptive: the shedder learns its capacity, and an adaptive in-flight
	// limit sits between the fixed caps and the rate limits. Without it
	// the adaptive stage is an empty chain, which admits everything.
	shed, adaptiveConc := st.Shed, floodgate.Admitter(floodgate.Chain{})
	if *adaptive {
		if shed, adaptiveConc, err = st.Adaptive(logger, *cpuTarget); err != nil {
			return err
		}
	}
	srv := grpc.NewServer(
		grpc.StatsHandler(otelgrpc.NewServerHandler(
			otelgrpc.WithMeterProvider(st.MeterProvider), otelgrpc.WithTracerProvider(st.TracerProvider))),
		// go-grpc-middleware v2 around floodgate's stages: logging first, so
		// its line sees denials; realip before floodgate; a selector keeps
		// -unlimited methods away from every stage; recovery innermost.
		grpc.ChainUnaryInterceptor(
			logging.UnaryServerInterceptor(mw.logger, mw.logOpts...),
			realip.UnaryServerInterceptorOpts(mw.realIP...),
			selector.UnaryServerInterceptor(fg.UnaryServer(shed), mw.limited),         // 1. shed low priorities near capacity
			selector.UnaryServerInterceptor(fg.UnaryServer(st.Conc), mw.limited),      // 2. cap requests in flight
			selector.UnaryServerInterceptor(fg.UnaryServer(adaptiveConc), mw.limited), // 2b. -adaptive: an in-flight limit learnt from latency
			selector.UnaryServerInterceptor(fg.UnaryServer(st.Limits), mw.limited),    // 3. the policy's rate limits
			recovery.UnaryServerInterceptor(mw.recovered),
		),
		grpc.ChainStreamInterceptor(
			logging.StreamServerInterceptor(mw.logger, mw.logOpts...),
			realip.StreamServerInterceptorOpts(mw.realIP...),
			selector.StreamServerInterceptor(fg.StreamServer(shed), mw.limited),
			selector.StreamServerInterceptor(fg.StreamServer(st.Conc), mw.limited),
			selector.StreamServerInterceptor(fg.StreamServer(adaptiveConc), mw.limited),
			selector.StreamServerInterceptor(fg.StreamServer(st.Limits), mw.limited),
			recovery.StreamServerInterceptor(mw.recovered),
		),
	)
	shoppb.RegisterShopServer(srv, shop{work: *work})
	healthpb.RegisterHealthServer(srv, health.NewServer()) // /grpc.health.v1.Health/* is never limited
	reflection.Register(srv)                               // -unlimited by default

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
