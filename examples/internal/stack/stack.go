// Package stack builds what the example services share: the rate-limit
// policy (loaded from a YAML file and hot-reloaded), the store the limits are
// kept in (in-process, or Redis timed by the observer behind a
// circuit-breaker fallback; either way behind a local-first store, so the
// policy's leased and async rules are decided locally, shared among the
// live instances that package fleet counts), the three floodgate stages
// (shedder, concurrency, tiers), and OpenTelemetry (the SDK, a Prometheus
// exporter, and the floodgate observer).
//
// What this package decides: the examples' sizes (shedder capacity, in-flight
// caps) and their telemetry wiring. The interceptor wiring itself stays in
// each example's main.go, where a reader looks for it.
package stack

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"time"

	promclient "github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/redis/go-redis/v9"
	"github.com/sony/gobreaker/v2"
	promexporter "go.opentelemetry.io/otel/exporters/prometheus"
	"go.opentelemetry.io/otel/exporters/stdout/stdouttrace"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/concurrency"
	"github.com/floodgate-go/floodgate/fallback"
	"github.com/floodgate-go/floodgate/fleet"
	fgotel "github.com/floodgate-go/floodgate/otel"
	"github.com/floodgate-go/floodgate/policyfile"
	"github.com/floodgate-go/floodgate/quota"
	"github.com/floodgate-go/floodgate/shedder"
	"github.com/floodgate-go/floodgate/tiers"
	"github.com/floodgate-go/floodgate/tiers/localfirst"
	"github.com/floodgate-go/floodgate/tiers/memstore"
	"github.com/floodgate-go/floodgate/tiers/redisstore"
)

// Config says how to build a Stack.
type Config struct {
	// PolicyPath is the YAML policy file (required). It is validated at
	// start and watched for changes afterwards.
	PolicyPath string
	// RedisURL, when set ("redis://127.0.0.1:6379/0"), keeps rate-limit
	// state in Redis behind the fallback store; empty keeps it in process.
	RedisURL string
	// Replicas, when positive, is how many instances share the limits (the
	// local-first shares and the fallback's local limiters). 0 counts the
	// live instances: from heartbeats in Redis (package fleet) with a
	// Redis URL, 1 in process.
	Replicas int
	// Service names the service, for the fleet of its live instances in
	// Redis: instances of one service share its limits, other services'
	// instances do not count. "" means "shop".
	Service string
	// Logger receives reload, breaker and fallback logs (required).
	Logger *slog.Logger
	// Traces, when set, receives every span as a line of JSON, written
	// synchronously: for watching a demo, not for production, where a
	// batching OTLP exporter belongs. When nil no span is sampled, so no
	// span work is done at all.
	Traces io.Writer
}

// Sizes of the example services. A real service measures its own capacity.
const (
	// ShedCapacity is the shedder's capacity in requests in flight: test
	// traffic is shed from 70% of it, reads from 80%, writes from 90%.
	ShedCapacity = 64
	// MaxInFlight caps the requests in flight on one instance. It is above
	// ShedCapacity because critical traffic is never shed: this cap is what
	// finally bounds it.
	MaxInFlight = 128
	// PerUserInFlight caps one user's requests in flight.
	PerUserInFlight = 8
	// StoreTimeout is the budget of one Redis round trip before the
	// fallback decides locally.
	StoreTimeout = 25 * time.Millisecond
)

// Stack is the examples' shared setup.
type Stack struct {
	// Shed, Conc and Limits are the three stages, in chain order, each
	// wrapped so the observer counts its requests in flight.
	Shed, Conc, Limits floodgate.Admitter
	// Limiter is the rate-limit stage itself, for its policy's per-method
	// options and for hot reload.
	Limiter *tiers.Limiter
	// Observer reports every decision to OpenTelemetry.
	Observer *fgotel.Observer
	// MeterProvider and TracerProvider are the OpenTelemetry SDK providers,
	// for the transport instrumentation (otelhttp, otelgrpc).
	MeterProvider  *sdkmetric.MeterProvider
	TracerProvider *sdktrace.TracerProvider
	// Metrics serves the Prometheus exposition of every metric.
	Metrics http.Handler
	// StoreName says where rate-limit state lives, for the startup line.
	StoreName string

	cfg    Config
	closer []func(context.Context) error
	// shed and conc are the shedder and concurrency stages unwrapped: the
	// policy's shedder: and concurrency: sections configure them on reload.
	shed *shedder.Shedder
	conc *concurrency.Limiter
}

// New builds the stack. The error names what is wrong: the policy file and the
// line of each error in it, an unreachable Redis, a bad option.
func New(ctx context.Context, cfg Config) (*Stack, error) {
	if cfg.PolicyPath == "" {
		return nil, errors.New("stack: no policy file given")
	}
	if cfg.Logger == nil {
		return nil, errors.New("stack: no logger given")
	}
	if cfg.Replicas < 0 {
		return nil, fmt.Errorf("stack: replicas %d is negative", cfg.Replicas)
	}
	file, err := policyfile.LoadFile(cfg.PolicyPath)
	if err != nil {
		return nil, fmt.Errorf("policy %s: %w", cfg.PolicyPath, err)
	}
	s := &Stack{cfg: cfg}

	// OpenTelemetry: the SDK with a Prometheus exporter on its own registry,
	// and a tracer provider whose spans carry the floodgate.* attributes.
	reg := promclient.NewRegistry()
	exporter, err := promexporter.New(promexporter.WithRegisterer(reg))
	if err != nil {
		return nil, fmt.Errorf("prometheus exporter: %w", err)
	}
	s.MeterProvider = sdkmetric.NewMeterProvider(sdkmetric.WithReader(exporter))
	if cfg.Traces != nil {
		spans, err := stdouttrace.New(stdouttrace.WithWriter(cfg.Traces))
		if err != nil {
			return nil, fmt.Errorf("span exporter: %w", err)
		}
		s.TracerProvider = sdktrace.NewTracerProvider(sdktrace.WithSyncer(spans))
	} else {
		s.TracerProvider = sdktrace.NewTracerProvider(sdktrace.WithSampler(sdktrace.NeverSample()))
	}
	s.closer = append(s.closer, s.MeterProvider.Shutdown, s.TracerProvider.Shutdown)
	s.Metrics = promhttp.HandlerFor(reg, promhttp.HandlerOpts{})
	s.Observer, err = fgotel.New(fgotel.WithMeterProvider(s.MeterProvider), fgotel.WithTracerProvider(s.TracerProvider))
	if err != nil {
		return nil, fmt.Errorf("floodgate observer: %w", err)
	}

	store, err := s.newStore(ctx)
	if err != nil {
		s.Close(context.Background())
		return nil, err
	}
	s.Limiter, err = tiers.NewLimiter(store, file.Limits)
	if err != nil {
		s.Close(context.Background())
		return nil, fmt.Errorf("rate limiter: %w", err)
	}
	shed, err := shedder.New(ShedCapacity)
	if err != nil {
		s.Close(context.Background())
		return nil, fmt.Errorf("shedder: %w", err)
	}
	conc, err := concurrency.New(
		concurrency.WithGlobal(MaxInFlight),
		concurrency.WithPerKey(concurrency.PerKey{
			Name: "per-user-in-flight",
			Cap:  PerUserInFlight,
			Key: func(r *floodgate.Request) (string, bool) {
				return r.Identity.User, r.Identity.User != ""
			},
		}),
	)
	if err != nil {
		s.Close(context.Background())
		return nil, fmt.Errorf("concurrency limiter: %w", err)
	}
	s.shed, s.conc = shed, conc
	s.Shed = s.Observer.TrackInFlight(shed)
	s.Conc = s.Observer.TrackInFlight(conc)
	s.Limits = s.Observer.TrackInFlight(s.Limiter)
	return s, nil
}

// newStore returns the store the limiter decides with: a local-first store
// (leased and async rules decided here, every other rule by the store
// beneath) over the in-process store, or, with a Redis URL, over the Redis
// store timed by the observer and guarded by the fallback store, leasing
// from and reporting to Redis itself, with the live instances counted by
// fleet heartbeats in the same Redis.
func (s *Stack) newStore(ctx context.Context) (quota.Store, error) {
	if s.cfg.RedisURL == "" {
		mem, err := memstore.New()
		if err != nil {
			return nil, fmt.Errorf("memory store: %w", err)
		}
		n := max(1, s.cfg.Replicas)
		s.StoreName = "in-process memory (memstore), local-first for leased and async rules"
		return s.localFirst(s.Observer.Store(mem), mem, func() int { return n })
	}
	// NewClient sets go-redis up for the fallback (deadlines from the
	// context, no retries inside the budget) from any URL form:
	// standalone, redis+sentinel:// or redis+cluster://.
	client, err := redisstore.NewClient(s.cfg.RedisURL)
	if err != nil {
		return nil, fmt.Errorf("REDIS_URL: %w", err)
	}
	addr := s.cfg.RedisURL
	if u, err := url.Parse(s.cfg.RedisURL); err == nil && u.Host != "" {
		addr = u.Host // never print credentials
	}
	redisstore.SetRedisLogger(s.cfg.Logger, slog.LevelDebug)
	s.closer = append(s.closer, func(context.Context) error { return client.Close() })
	pingCtx, cancel := context.WithTimeout(ctx, 2*time.Second)
	unreachable := client.Ping(pingCtx).Err()
	cancel()
	if unreachable != nil {
		// Not fatal: the breaker opens, the rules decide locally, and Redis
		// takes over when it answers.
		s.cfg.Logger.Warn("Redis does not answer yet; deciding locally until it does", "addr", addr, "error", unreachable)
	}
	// Batching: the takes of concurrent requests share script calls, which
	// is where a busy server's Redis throughput is (see the README).
	rs, err := redisstore.New(client, redisstore.WithBatching(2, 64))
	if err != nil {
		return nil, fmt.Errorf("redis store: %w", err)
	}
	s.closer = append(s.closer, func(context.Context) error { return rs.Close() })
	instances, err := s.members(client)
	if err != nil {
		return nil, err
	}
	guarded, err := fallback.New(s.Observer.Store(rs),
		fallback.WithName("redis"),
		fallback.WithTimeout(StoreTimeout),
		fallback.WithInstances(instances),
		fallback.WithLogger(s.cfg.Logger),
		fallback.WithOnStateChange(func(name string, from, to gobreaker.State) {
			s.Observer.BreakerStateChanged(name, from.String(), to.String())
		}),
	)
	if err != nil {
		return nil, fmt.Errorf("fallback store: %w", err)
	}
	// Closed after the local-first store above it and before the Redis
	// store and client: it hands the units it admitted locally while
	// Redis was away over to Redis, within 2s.
	s.closer = append(s.closer, func(ctx context.Context) error {
		ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		return guarded.Close(ctx)
	})
	s.StoreName = "Redis at " + addr + " (circuit breaker, local fallback; local-first for leased and async rules)"
	if unreachable != nil {
		s.StoreName += ", unreachable at start"
	}
	// Leases are taken through the fallback (the exact store), and async
	// hits and unspent leases are reported to Redis itself.
	return s.localFirst(guarded, rs, instances)
}

// members returns how many live instances share the limits: Replicas when
// set, else the count of heartbeats in Redis, kept by a fleet.Members that
// runs until Close (which leaves the fleet).
func (s *Stack) members(client redis.UniversalClient) (func() int, error) {
	if s.cfg.Replicas > 0 {
		n := s.cfg.Replicas
		return func() int { return n }, nil
	}
	service := s.cfg.Service
	if service == "" {
		service = "shop"
	}
	m, err := fleet.New(client, fleet.WithKey("fg:fleet:{"+service+"}"), fleet.WithLogger(s.cfg.Logger))
	if err != nil {
		return nil, fmt.Errorf("fleet members: %w", err)
	}
	runCtx, stop := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = m.Run(runCtx) // returns ctx's error once it has left the fleet
	}()
	s.closer = append(s.closer, func(context.Context) error { stop(); <-done; return nil })
	return m.Count, nil
}

// localFirst puts a local-first store in front of exact, leasing from and
// reporting to ledger; Close returns its unspent leases and reports its
// hits before the stores beneath close.
func (s *Stack) localFirst(exact quota.Store, ledger quota.Reporter, instances func() int) (quota.Store, error) {
	lf, err := localfirst.New(exact, ledger, localfirst.WithInstances(instances), localfirst.WithLogger(s.cfg.Logger))
	if err != nil {
		return nil, fmt.Errorf("local-first store: %w", err)
	}
	s.closer = append(s.closer, lf.Close)
	return lf, nil
}

// WatchPolicy reloads the policy file whenever it changes, until ctx ends:
// its rules, and its shedder: and concurrency: sections, which set the
// shedder's capacity and thresholds and the global in-flight cap (a
// section the file leaves out returns its stage to the sizes above). A
// file that fails to load leaves everything in force and is logged with
// the line of each error.
func (s *Stack) WatchPolicy(ctx context.Context) {
	err := policyfile.Watch(ctx, s.cfg.PolicyPath,
		policyfile.Targets{Limits: s.Limiter, Shedder: s.shed, Concurrency: s.conc},
		policyfile.WithInterval(time.Second),
		policyfile.WithLogger(s.cfg.Logger),
	)
	if err != nil && !errors.Is(err, context.Canceled) {
		s.cfg.Logger.Error("policy watch stopped", "err", err)
	}
}

// Close flushes telemetry, hands what the local-first and fallback
// stores hold over to Redis, and closes the Redis store and client, in
// the reverse order of their making.
func (s *Stack) Close(ctx context.Context) error {
	var errs []error
	for i := len(s.closer) - 1; i >= 0; i-- {
		errs = append(errs, s.closer[i](ctx))
	}
	return errors.Join(errs...)
}

// ServeMetrics serves h on /metrics at addr in the background. It returns the
// address it listens on (addr may name port 0) and a function that stops it.
func ServeMetrics(addr string, h http.Handler) (string, func(), error) {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", h)
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return "", nil, fmt.Errorf("metrics listener: %w", err)
	}
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go srv.Serve(ln) //nolint:errcheck // ends with ErrServerClosed on stop
	return ln.Addr().String(), func() { srv.Close() }, nil
}
