// Command http is a small shop API protected by the whole floodgate chain,
// built by package guard from policy.yaml (hot-reloaded): the priority load
// shedder, the in-flight caps (per instance and per user) and the
// hierarchical rate limits, kept in process or, when REDIS_URL is set, in
// Redis behind a circuit breaker. Decisions are traced and counted with
// OpenTelemetry and exposed for Prometheus on a separate port. The policy's
// shedder: and concurrency: sections size the overload stages; their
// comments say how to make them adaptive: no capacity to guess.
//
//	cd examples && go run ./http
//	curl -i -H 'X-User: alice' 'http://127.0.0.1:8080/v1/search?q=lamp'
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"

	"github.com/floodgate-go/floodgate/examples/internal/telemetry"
	"github.com/floodgate-go/floodgate/guard"
	"github.com/floodgate-go/floodgate/interceptor"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stdout); errors.Is(err, flag.ErrHelp) {
		os.Exit(2)
	} else if err != nil {
		fmt.Fprintln(os.Stderr, "http example:", err)
		os.Exit(1)
	}
}

// run serves the API until ctx ends.
func run(ctx context.Context, args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("http", flag.ContinueOnError)
	fs.SetOutput(stdout)
	addr := fs.String("addr", "127.0.0.1:8080", "address the API listens on")
	metricsAddr := fs.String("metrics-addr", "127.0.0.1:9464", "address of the Prometheus /metrics endpoint")
	policyPath := fs.String("policy", "policy.yaml", "rate-limit and overload policy, reloaded when it changes")
	redisURL := fs.String("redis", os.Getenv("REDIS_URL"), "Redis URL for limits shared by every instance (default $REDIS_URL; empty: in process)")
	trace := fs.Bool("trace", false, "print every span (with its floodgate.* attributes) as JSON")
	work := fs.Duration("work", 10*time.Millisecond, "simulated work per API request")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	logger := slog.New(slog.NewTextHandler(stdout, nil))
	var traces io.Writer
	if *trace {
		traces = stdout
	}
	tel, err := telemetry.New("github.com/floodgate-go/floodgate/examples/http", traces)
	if err != nil {
		return err
	}
	defer tel.Shutdown(context.Background())

	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/login", handle(*work, func(r *http.Request) (int, any) {
		if loginUser(r) == "" || r.FormValue("password") != "hunter2" {
			return http.StatusUnauthorized, map[string]string{"error": "wrong user or password"}
		}
		return http.StatusOK, map[string]string{"token": "session-" + loginUser(r)}
	}))
	mux.HandleFunc("GET /v1/search", handle(*work, func(r *http.Request) (int, any) {
		return http.StatusOK, map[string]any{"query": r.FormValue("q"), "items": []string{"lamp", "desk"}}
	}))
	mux.HandleFunc("POST /v1/payments", handle(*work, func(*http.Request) (int, any) {
		return http.StatusCreated, map[string]string{"payment_id": "pay_" + time.Now().Format("150405.000000")}
	}))
	mux.HandleFunc("GET /v1/items/{id}", handle(*work, func(r *http.Request) (int, any) {
		return http.StatusOK, map[string]string{"id": r.PathValue("id"), "name": "item " + r.PathValue("id")}
	}))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "ok\n") })

	// The chain, from the policy file: shed low priorities near capacity,
	// cap requests in flight, then charge the policy's rate limits (whose
	// methods: section sets each route's cost and priority). New reports
	// every mistake at start, a policy's with its line.
	store := guard.WithInProcess() // one instance
	if *redisURL != "" {
		store = guard.WithRedisURL(*redisURL) // a fleet: the live instances of shop-http share the limits
	}
	g, err := guard.New(ctx,
		guard.WithPolicyFile(*policyPath),
		store,
		guard.WithService("shop-http"),
		guard.WithStoreTimeout(25*time.Millisecond), // a Redis call's budget before the rules decide locally
		guard.WithServeMux(mux),                     // requests are named by route pattern
		guard.WithLogger(logger),
		guard.WithMeterProvider(tel.MP), guard.WithTracerProvider(tel.TP),
		guard.WithInterceptor(
			interceptor.WithHealthPaths("/healthz"), // never limited
			// Identity: an auth proxy in front sets these headers and
			// strips them from client requests. The client IP is the
			// peer address. The user of a login is the account its form
			// submits, so the login limits follow the account guessed
			// whatever X-User says.
			interceptor.WithUser(interceptor.FirstOf(interceptor.FromHTTPRequest(loginUser), interceptor.FromHeader("X-User"))),
			interceptor.WithTenant(interceptor.FromHeader("X-Tenant")),
			interceptor.WithTier(interceptor.FromHeader("X-Tier")),
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
	handler := otelhttp.NewHandler(g.HTTP(mux), "shop-http",
		otelhttp.WithMeterProvider(tel.MP), otelhttp.WithTracerProvider(tel.TP))

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
	srv := &http.Server{Handler: handler, ReadHeaderTimeout: 5 * time.Second}
	fmt.Fprintf(stdout, "http example listening on http://%s\n", ln.Addr())
	fmt.Fprintf(stdout, "  metrics: http://%s/metrics\n  denied:  floodgate top -url http://%s%s\n  store:   %s\n  policy:  %s (reloaded on change)\n",
		metrics, metrics, telemetry.TopPath, g.Store(), *policyPath)

	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	shutdownCtx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := srv.Shutdown(shutdownCtx); err != nil {
		return fmt.Errorf("shutdown: %w", err)
	}
	if err := <-errc; !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}
