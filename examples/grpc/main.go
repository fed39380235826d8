// Command grpc is the example shop as a gRPC service (internal/shoppb)
// protected by the whole floodgate chain, built by package guard from
// policy.yaml (hot-reloaded): the priority load shedder, the in-flight caps
// (per instance and per user) and the hierarchical rate limits, kept in
// process or, when REDIS_URL is set, in Redis behind a circuit breaker. The
// gRPC health service is never limited. Decisions are traced and counted
// with OpenTelemetry and exposed for Prometheus over HTTP. The chain runs
// inside go-grpc-middleware v2's logging, realip, selector and recovery
// interceptors (package grpcmw): each call's log line carries floodgate's
// decision, the client behind -trusted-proxies is limited by its own
// address, and -unlimited methods are never limited. The policy's shedder:
// and concurrency: sections size the overload stages; their comments say
// how to make them adaptive.
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

	"github.com/floodgate-go/floodgate/examples/internal/telemetry"
	"github.com/floodgate-go/floodgate/grpcmw"
	"github.com/floodgate-go/floodgate/guard"
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
	policyPath := fs.String("policy", "policy.yaml", "rate-limit and overload policy, reloaded when it changes")
	redisURL := fs.String("redis", os.Getenv("REDIS_URL"), "Redis URL for limits shared by every instance (default $REDIS_URL; empty: in process)")
	trace := fs.Bool("trace", false, "print every span (with its floodgate.* attributes) as JSON")
	work := fs.Duration("work", 10*time.Millisecond, "simulated work per call")
	trustedProxies := fs.String("trusted-proxies", "", "comma-separated CIDRs of proxies whose X-Forwarded-For names the client (realip)")
	unlimited := fs.String("unlimited", reflectionServices, "comma-separated methods (/pkg.Svc/Method or /pkg.Svc/*) floodgate never sees (selector)")
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
	var traces io.Writer
	if *trace {
		traces = stdout
	}
	tel, err := telemetry.New("github.com/floodgate-go/floodgate/examples/grpc", traces)
	if err != nil {
		return err
	}
	defer tel.Shutdown(context.Background())

	// The chain, from the policy file; the policy's methods: section and
	// then the proto annotations give each method its cost and priority.
	// Identity: an auth proxy in front sets these metadata keys and
	// strips them from client calls. New reports every mistake at start,
	// a policy's with its line.
	store := guard.WithInProcess() // one instance
	if *redisURL != "" {
		store = guard.WithRedisURL(*redisURL) // a fleet: the live instances of shop-grpc share the limits
	}
	g, err := guard.New(ctx,
		guard.WithPolicyFile(*policyPath),
		store,
		guard.WithService("shop-grpc"),
		guard.WithStoreTimeout(25*time.Millisecond), // a Redis call's budget before the rules decide locally
		guard.WithLogger(logger),
		guard.WithMeterProvider(tel.MP), guard.WithTracerProvider(tel.TP),
		guard.WithInterceptor(
			grpcmw.WithRealIP(),    // limit the client realip resolved
			grpcmw.WithLogFields(), // floodgate.* fields on each call's log line
			// The user of Login is the account it submits
			// (LoginRequest.user, marked floodgate.v1.identity in
			// shop.proto), so the login limits follow the account
			// guessed whatever x-user says; other calls' user is
			// x-user, from the auth proxy.
			interceptor.WithUser(interceptor.FirstOf(
				interceptor.FromProtoField(floodgatev1.Identity_IDENTITY_USER),
				interceptor.FromHeader("x-user"),
			)),
			interceptor.WithTenant(interceptor.FromHeader("x-tenant")),
			interceptor.WithTier(interceptor.FromHeader("x-tier")),
			interceptor.WithDomain("shop.example.com"), // google.rpc.ErrorInfo domain
		),
	)
	if err != nil {
		return err
	}
	defer g.Close(context.Background())
	unobserve, err := tel.ObserveStages(g.Chain())
	if err != nil {
		return err
	}
	defer unobserve()
	srv := grpc.NewServer(
		grpc.StatsHandler(otelgrpc.NewServerHandler(
			otelgrpc.WithMeterProvider(tel.MP), otelgrpc.WithTracerProvider(tel.TP))),
		// go-grpc-middleware v2 around floodgate's chain: logging first,
		// so its line sees denials; realip before floodgate; a selector
		// keeps -unlimited methods away from it; recovery innermost.
		grpc.ChainUnaryInterceptor(
			logging.UnaryServerInterceptor(mw.logger, mw.logOpts...),
			realip.UnaryServerInterceptorOpts(mw.realIP...),
			selector.UnaryServerInterceptor(g.UnaryServer(), mw.limited), // shed, cap in flight, rate-limit
			recovery.UnaryServerInterceptor(mw.recovered),
		),
		grpc.ChainStreamInterceptor(
			logging.StreamServerInterceptor(mw.logger, mw.logOpts...),
			realip.StreamServerInterceptorOpts(mw.realIP...),
			selector.StreamServerInterceptor(g.StreamServer(), mw.limited),
			recovery.StreamServerInterceptor(mw.recovered),
		),
	)
	shoppb.RegisterShopServer(srv, shop{work: *work})
	healthpb.RegisterHealthServer(srv, health.NewServer()) // /grpc.health.v1.Health/* is never limited
	reflection.Register(srv)                               // -unlimited by default
	// Every gRPC method the policy names is one the server serves: a typo
	// would leave a rule that never applies.
	if err := g.CheckServer(srv); err != nil {
		return err
	}

	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		return err
	}
	metrics, stopMetrics, err := telemetry.ServeMetrics(*metricsAddr, tel.Metrics, g.TopDeniedHandler())
	if err != nil {
		ln.Close()
		return err
	}
	defer stopMetrics()
	fmt.Fprintf(stdout, "grpc example listening on %s\n", ln.Addr())
	fmt.Fprintf(stdout, "  metrics: http://%s/metrics\n  denied:  floodgate top -url http://%s%s\n  store:   %s\n  policy:  %s (reloaded on change)\n",
		metrics, metrics, telemetry.TopPath, g.Store(), *policyPath)

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
