// Command http is a small shop API protected by the whole floodgate chain:
// the priority load shedder, the in-flight limiter and the hierarchical rate
// limits of policy.yaml (hot-reloaded), kept in process or, when REDIS_URL is
// set, in Redis behind a circuit breaker. Decisions are traced and counted with
// OpenTelemetry and exposed for Prometheus on a separate port. With
// -adaptive the shedder's capacity follows the service and an adaptive
// in-flight limit joins the chain: no capacity to guess.
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
	"sync"
	"syscall"
	"time"

	"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/examples/internal/stack"
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
	policyPath := fs.String("policy", "policy.yaml", "rate-limit policy, reloaded when it changes")
	redisURL := fs.String("redis", os.Getenv("REDIS_URL"), "Redis URL for limits shared by every instance (default $REDIS_URL; empty: in process)")
	trace := fs.Bool("trace", false, "print every span (with its floodgate.* attributes) as JSON")
	work := fs.Duration("work", 10*time.Millisecond, "simulated work per API request")
	adaptive := fs.Bool("adaptive", false, "adaptive overload control: the shedder's capacity follows the service instead of a fixed 64, and an adaptive in-flight limit (Gradient2) joins the chain")
	cpuTarget := fs.Float64("cpu-target", 0.9, "with -adaptive: the share of the container's CPU (its quota, else its CPUs) at which the shedder counts the service overloaded; 0 decides on latency alone")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	logger := slog.New(slog.NewTextHandler(stdout, nil))
	cfg := stack.Config{PolicyPath: *policyPath, RedisURL: *redisURL, Service: "shop-http", Logger: logger}
	if *trace {
		cfg.Traces = stdout
	}
	st, err := stack.New(ctx, cfg)
	if err != nil {
		return err
	}
	defer st.Close(context.Background())

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

	// The chain: shed low priorities near capacity, cap requests in flight,
	// then charge the policy's rate limits (whose methods: section sets each
	// route's cost and priority). New reports bad options at start.
	limit, err := interceptor.New(
		interceptor.WithServeMux(mux),           // requests are named by route pattern
		interceptor.WithHealthPaths("/healthz"), // never limited
		// Identity: an auth proxy in front sets these headers and strips
		// them from client requests. The client IP is the peer address.
		// The user of a login is the account its form submits, so the
		// login limits follow the account guessed whatever X-User says.
		interceptor.WithUser(interceptor.FirstOf(interceptor.FromHTTPRequest(loginUser), interceptor.FromHeader("X-User"))),
		interceptor.WithTenant(interceptor.FromHeader("X-Tenant")),
		interceptor.WithTier(interceptor.FromHeader("X-Tier")),
		interceptor.WithObserver(st.Observer), // spans and metrics
	)
	if err != nil {
		return err
	}
	chain := floodgate.Chain{st.Shed, st.Conc, st.Limits}
	if *adaptive {
		shed, conc, err := st.Adaptive(logger, *cpuTarget)
		if err != nil {
			return err
		}
		chain = floodgate.Chain{shed, st.Conc, conc, st.Limits}
	}
	handler := otelhttp.NewHandler(limit.HTTP(chain)(mux), "shop-http",
		otelhttp.WithMeterProvider(st.MeterProvider), otelhttp.WithTracerProvider(st.TracerProvider))

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
	srv := &http.Server{Handler: handler, ReadHeaderTimeout: 5 * time.Second}
	fmt.Fprintf(stdout, "http example listening on http://%s\n", ln.Addr())
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
