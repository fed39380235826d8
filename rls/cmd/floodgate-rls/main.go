// Command floodgate-rls serves Envoy's rate limit service from a floodgate
// policy, and translates envoyproxy/ratelimit configurations into one.
//
//	floodgate-rls serve-rls -policy POLICY.yaml [-listen 127.0.0.1:8081] [-redis URL]
//	                        [-metrics 127.0.0.1:9464] [-watch 2s] [-service floodgate-rls] [-instances 0]
//	                        [-key-prefix fg:] [-store-timeout 5ms] [-drain 10s] [-headers=true]
//	                        [-rlqs=true] [-rlqs-tick 500ms]
//	floodgate-rls translate [-as KEY=SCOPE]... [-ignore-metric-options] [-merge-domains] [-consistency exact|leased|async] [-o FILE] CONFIG.yaml...
//
// serve-rls answers envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit
// (package github.com/floodgate-go/floodgate/rls) with the policy's rules
// and its rls: section, and (unless -rlqs=false) Envoy's rate limit quota
// service, envoy.service.rate_limit_quota.v3.RateLimitQuotaService, for
// its domains with quota: true, whose clients' claims it shares with the
// other serve-rls of the same Redis, plus the gRPC health service, until SIGINT or
// SIGTERM, then drains gracefully. Buckets live in process unless -redis
// (or REDIS_URL) names a Redis server, which is then used through the
// circuit-breaking fallback store (package fallback), and, for rules with
// consistency leased or async, a local-first store (package
// tiers/localfirst): the store stack package guard builds. While Redis
// does not answer, each serve-rls admits its share of every limit: the
// limit divided by the live serve-rls of the same -service on that Redis,
// counted by heartbeats (package fleet, key KEY-PREFIX+"fleet:{SERVICE}"),
// unless -instances fixes the count. The services must use the same key
// prefix (tiers.WithKeyPrefix; "fg:" by default) to share the budget. The policy
// file is watched (-watch; 0 disables) and reloaded when it changes; a
// file that does not load leaves the policy in force and is logged with
// the line of every error. -metrics serves the OpenTelemetry metrics of
// package otel at /metrics in the Prometheus format.
//
// translate prints the floodgate policy equivalent to envoyproxy/ratelimit
// configuration files (package github.com/floodgate-go/floodgate/rls/translate);
// -as maps a descriptor key to the scope its values fill (-as
// tenant-id=tenant), -merge-domains merges a domain given in several files,
// every feature it cannot honour is an error naming the file and line,
// and what it accepts but reports differently (detailed_metric) is a
// warning on standard error and in the output.
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
	"strings"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/redis/go-redis/v9"
	promexp "go.opentelemetry.io/otel/exporters/prometheus"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"

	"google.golang.org/grpc"

	"github.com/floodgate-go/floodgate/internal/storestack"
	fgotel "github.com/floodgate-go/floodgate/otel"
	"github.com/floodgate-go/floodgate/policyfile"
	"github.com/floodgate-go/floodgate/quota"
	"github.com/floodgate-go/floodgate/rls"
	"github.com/floodgate-go/floodgate/rls/translate"
	"github.com/floodgate-go/floodgate/tiers"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	os.Exit(run(ctx, os.Args[1:], os.Stdout, os.Stderr))
}

const usage = `usage:
  floodgate-rls serve-rls -policy POLICY.yaml [-listen 127.0.0.1:8081] [-redis URL] [-metrics ADDR] [-watch 2s] [-service floodgate-rls] [-instances N] [-key-prefix fg:] [-store-timeout 5ms] [-drain 10s] [-headers=true] [-rlqs=true] [-rlqs-tick 500ms]
  floodgate-rls translate [-as KEY=SCOPE]... [-ignore-metric-options] [-merge-domains] [-consistency exact|leased|async] [-o FILE] CONFIG.yaml...
`

// run is the command; it returns the exit code.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return 2
	}
	switch args[0] {
	case "serve-rls":
		return serveRLS(ctx, args[1:], stdout, stderr)
	case "translate":
		return runTranslate(args[1:], stdout, stderr)
	case "-h", "-help", "--help", "help":
		fmt.Fprint(stdout, usage)
		return 0
	}
	fmt.Fprintf(stderr, "floodgate-rls: unknown command %q\n%s", args[0], usage)
	return 2
}

// serveConfig is what serve-rls's flags say.
type serveConfig struct {
	policy, listen, redis, metrics, keyPrefix, service string
	watch, storeTimeout, drain, quotaTick              time.Duration
	instances                                          int
	headers, quota                                     bool
}

func serveRLS(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("serve-rls", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var c serveConfig
	fs.StringVar(&c.policy, "policy", "", "the floodgate policy `file` (rules and its rls: section); required")
	fs.StringVar(&c.listen, "listen", "127.0.0.1:8081", "gRPC listen `address`")
	fs.StringVar(&c.redis, "redis", os.Getenv("REDIS_URL"), "Redis `URL` (redis://, redis+sentinel://, redis+cluster://); empty: in-process buckets (default $REDIS_URL)")
	fs.StringVar(&c.metrics, "metrics", "", "serve Prometheus metrics at http://`ADDR`/metrics; empty: none")
	fs.DurationVar(&c.watch, "watch", 2*time.Second, "how often to check the policy file for changes; 0: never")
	fs.StringVar(&c.service, "service", "floodgate-rls", "the `name` of this serve-rls fleet: its live instances on the same Redis are counted together (a deployment of its own per name)")
	fs.IntVar(&c.instances, "instances", 0, "how many serve-rls share each limit while Redis is down (each one's local share): 0 counts the live instances of -service by heartbeats in Redis; N >= 1 is a fixed count")
	fs.StringVar(&c.keyPrefix, "key-prefix", "fg:", "bucket key prefix; the services must use the same one")
	fs.DurationVar(&c.storeTimeout, "store-timeout", 0, "budget of one Redis call before the rules decide by on_store_error; 0: package fallback's default")
	fs.DurationVar(&c.drain, "drain", rls.DefaultDrainTimeout, "at shutdown, how long calls in flight may take")
	fs.BoolVar(&c.headers, "headers", true, "add RateLimit-Policy, RateLimit and Retry-After to the responses")
	fs.BoolVar(&c.quota, "rlqs", true, "also serve Envoy's rate limit quota service (RLQS) on the same port, for the rls: domains with quota: true")
	fs.DurationVar(&c.quotaTick, "rlqs-tick", rls.DefaultQuotaTick, "how often RLQS charges reported usage, reads the other servers' claims and pushes changed assignments")
	switch err := fs.Parse(args); {
	case errors.Is(err, flag.ErrHelp):
		return 0
	case err != nil:
		return 2
	}
	var bad []string
	if c.policy == "" {
		bad = append(bad, "-policy is required")
	}
	if c.instances < 0 {
		bad = append(bad, fmt.Sprintf("-instances %d is negative (0 counts the live instances, N >= 1 is a fixed count)", c.instances))
	}
	if msg := checkService(c.service); msg != "" {
		bad = append(bad, msg)
	}
	if c.watch < 0 || c.storeTimeout < 0 || c.drain <= 0 {
		bad = append(bad, "-watch and -store-timeout must be >= 0, -drain > 0")
	}
	if fs.NArg() > 0 {
		bad = append(bad, fmt.Sprintf("unexpected arguments %q", fs.Args()))
	}
	if len(bad) > 0 {
		fmt.Fprintf(stderr, "floodgate-rls serve-rls: %s\n", strings.Join(bad, "; "))
		return 2
	}
	logger := slog.New(slog.NewTextHandler(stderr, nil))
	if err := serve(ctx, c, stdout, logger); err != nil {
		fmt.Fprintf(stderr, "floodgate-rls serve-rls: %v\n", err)
		return 1
	}
	return 0
}

// serve runs serve-rls until ctx is done.
func serve(ctx context.Context, c serveConfig, stdout io.Writer, logger *slog.Logger) error {
	file, err := policyfile.LoadFile(c.policy)
	if err != nil {
		return err
	}
	policy := file.Limits
	var closers []func()
	defer func() {
		for i := len(closers) - 1; i >= 0; i-- {
			closers[i]()
		}
	}()

	obsOpts := []fgotel.Option{}
	if c.metrics != "" {
		reg := prometheus.NewRegistry()
		exp, err := promexp.New(promexp.WithRegisterer(reg))
		if err != nil {
			return fmt.Errorf("metrics: %w", err)
		}
		mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(exp))
		closers = append(closers, func() { _ = mp.Shutdown(context.Background()) })
		obsOpts = append(obsOpts, fgotel.WithMeterProvider(mp))
		ln, err := net.Listen("tcp", c.metrics)
		if err != nil {
			return fmt.Errorf("metrics listener: %w", err)
		}
		mux := http.NewServeMux()
		mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
		hs := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
		go func() { _ = hs.Serve(ln) }()
		closers = append(closers, func() { _ = hs.Close() })
		fmt.Fprintf(stdout, "floodgate-rls: metrics on http://%s/metrics\n", ln.Addr())
	}
	obs, err := fgotel.New(obsOpts...)
	if err != nil {
		return fmt.Errorf("telemetry: %w", err)
	}

	st, err := newStore(ctx, c, obs, logger)
	if err != nil {
		return err
	}
	closers = append(closers, st.close)
	limiter, err := tiers.NewLimiter(st.store, policy, tiers.WithKeyPrefix(c.keyPrefix))
	if err != nil {
		return err
	}
	srvOpts := []rls.Option{rls.WithObserver(obs), rls.WithLogger(logger), rls.WithResponseHeaders(c.headers), rls.WithDrainTimeout(c.drain)}
	if c.quota {
		qopts := []rls.QuotaOption{rls.WithQuotaLogger(logger), rls.WithQuotaTick(c.quotaTick)}
		if st.redis != nil {
			qopts = append(qopts, rls.WithQuotaRedis(st.redis))
		}
		q, err := rls.NewQuota(limiter, st.ledger, qopts...)
		if err != nil {
			return err
		}
		closers = append(closers, func() {
			cctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			_ = q.Close(cctx) // charges what was reported last
		})
		srvOpts = append(srvOpts, rls.WithQuota(q))
	}
	srv, err := rls.New(limiter, srvOpts...)
	if err != nil {
		return err
	}
	lis, err := net.Listen("tcp", c.listen)
	if err != nil {
		return fmt.Errorf("listen: %w", err)
	}
	if c.watch > 0 {
		wctx, cancel := context.WithCancel(ctx)
		done := make(chan struct{})
		go func() {
			defer close(done)
			_ = policyfile.Watch(wctx, c.policy, policyfile.Targets{Limits: limiter}, policyfile.WithInterval(c.watch), policyfile.WithLogger(logger))
		}()
		closers = append(closers, func() { cancel(); <-done })
	}
	domains := make([]string, 0, len(policy.RLS))
	for _, d := range policy.RLS {
		domains = append(domains, d.Domain)
	}
	fmt.Fprintf(stdout, "floodgate-rls: serving %s on %s (domains %s; %d rules; buckets in %s)\n",
		rls.ServiceName, lis.Addr(), strings.Join(domains, ", "), len(policy.Rules), st.name)
	if c.quota {
		fmt.Fprintf(stdout, "floodgate-rls: serving %s on %s too (the domains with quota: true)\n", rls.QuotaServiceName, lis.Addr())
	}
	if len(domains) == 0 {
		logger.Warn("floodgate-rls: the policy has no rls: section: every descriptor is answered OK, unlimited", "policy", c.policy)
	}
	err = srv.Serve(ctx, lis, grpc.NumStreamWorkers(streamWorkers))
	fmt.Fprintln(stdout, "floodgate-rls: stopped")
	return err
}

// stores are what newStore opened.
type stores struct {
	store  quota.Store    // what the limiter decides with
	ledger quota.Reporter // where the buckets live: what RLQS charges
	redis  redis.UniversalClient
	name   string
	close  func()
}

// newStore returns the store stack package guard builds (package
// internal/storestack): in process, or Redis behind the fallback; either
// way behind a local-first store for leased and async rules. RLQS charges
// the store beneath (the ledger). The instances sharing each limit are
// the live serve-rls of -service on the same Redis unless -instances
// fixes them; their heartbeats are under -key-prefix ("fg:fleet:{...}"
// by default). -key-prefix names the buckets through the limiter
// (tiers.WithKeyPrefix), as the services do, so the Redis store adds no
// prefix of its own. guard.New itself does not fit: it refuses a rule
// keyed on a scope its interceptor never fills, which the rules keyed on
// the descriptors' scopes (tenant, header:...) are.
func newStore(ctx context.Context, c serveConfig, obs *fgotel.Observer, logger *slog.Logger) (stores, error) {
	cfg := storestack.Config{
		InProcess: c.redis == "",
		URL:       c.redis,
		Timeout:   c.storeTimeout,
		Instances: c.instances,
		Logger:    logger,
		Observer:  obs,
	}
	if !cfg.InProcess {
		cfg.Service = c.service
		cfg.FleetKey = c.keyPrefix + "fleet:{" + c.service + "}"
	}
	st, err := storestack.New(ctx, cfg)
	if urlErr := (*storestack.URLError)(nil); errors.As(err, &urlErr) {
		return stores{}, fmt.Errorf("-redis: %w", urlErr.Err)
	}
	if err != nil {
		return stores{}, err
	}
	name := st.Desc
	if cfg.InProcess {
		name = "process memory"
	}
	return stores{store: st.Store, ledger: st.Ledger, redis: st.Client, name: name, close: func() {
		if err := st.Close(context.Background()); err != nil {
			logger.Warn("floodgate-rls: closing the store", "error", err)
		}
	}}, nil
}

// checkService says what is wrong with a -service name, or "".
func checkService(name string) string {
	if name == "" {
		return "-service is empty"
	}
	for _, r := range name {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_' || r == '.') {
			return fmt.Sprintf("-service %q holds %q (letters, digits, '-', '_' and '.' only)", name, r)
		}
	}
	return ""
}

// asFlags collects -as KEY=SCOPE.
type asFlags map[string]string

func (a asFlags) String() string { return fmt.Sprint(map[string]string(a)) }

func (a asFlags) Set(s string) error {
	k, v, ok := strings.Cut(s, "=")
	if !ok || k == "" || v == "" {
		return fmt.Errorf("%q is not KEY=SCOPE", s)
	}
	if _, dup := a[k]; dup {
		return fmt.Errorf("key %q is mapped twice", k)
	}
	a[k] = v
	return nil
}

func runTranslate(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("translate", flag.ContinueOnError)
	fs.SetOutput(stderr)
	as := asFlags{}
	fs.Var(as, "as", "map a descriptor key to the scope its values fill: `KEY=SCOPE` (ip, user, tenant, api_key, endpoint, header:NAME); repeatable")
	ignore := fs.Bool("ignore-metric-options", false, "drop detailed_metric and value_to_metric without a warning")
	merge := fs.Bool("merge-domains", false, "merge the descriptors of a domain given in several files (envoyproxy/ratelimit's MERGE_DOMAIN_CONFIG) instead of refusing it")
	consistency := fs.String("consistency", "exact", "where every rule is decided: exact (fixed windows in the store, as envoyproxy/ratelimit), or leased or async (token buckets decided locally against the store's budget)")
	outPath := fs.String("o", "", "write the policy to `FILE` instead of standard output")
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), "usage: floodgate-rls translate [-as KEY=SCOPE]... [-ignore-metric-options] [-merge-domains] [-consistency exact|leased|async] [-o FILE] CONFIG.yaml...\n\n")
		fs.PrintDefaults()
	}
	switch err := fs.Parse(args); {
	case errors.Is(err, flag.ErrHelp):
		return 0
	case err != nil:
		return 2
	}
	if fs.NArg() == 0 {
		fmt.Fprintln(stderr, "floodgate-rls translate: name at least one envoyproxy/ratelimit configuration file")
		return 2
	}
	var files []translate.File
	for _, p := range fs.Args() {
		b, err := os.ReadFile(p)
		if err != nil {
			fmt.Fprintf(stderr, "floodgate-rls translate: %v\n", err)
			return 1
		}
		files = append(files, translate.File{Name: p, Data: b})
	}
	out, err := translate.Translate(files, translate.Options{As: as, IgnoreMetricOptions: *ignore, MergeDomains: *merge, Consistency: *consistency})
	if err != nil {
		fmt.Fprintf(stderr, "floodgate-rls translate:\n%v\n", err)
		return 1
	}
	for line := range strings.Lines(string(out)) {
		if w, ok := strings.CutPrefix(line, translate.WarningPrefix); ok {
			fmt.Fprintf(stderr, "floodgate-rls translate: warning: %s", w)
		}
	}
	if *outPath == "" {
		_, err = stdout.Write(out)
	} else {
		err = os.WriteFile(*outPath, out, 0o644)
	}
	if err != nil {
		fmt.Fprintf(stderr, "floodgate-rls translate: %v\n", err)
		return 1
	}
	return 0
}

// streamWorkers is how many goroutines serve calls: reused, so a call does
// not start a goroutine and grow its stack (a profile under load showed a
// tenth of the CPU in stack growth); calls beyond them still get a
// goroutine each.
const streamWorkers = 256
