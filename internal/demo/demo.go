package demo

import (
	"context"
	_ "embed"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/concurrency"
	"github.com/floodgate-go/floodgate/fallback"
	"github.com/floodgate-go/floodgate/interceptor"
	"github.com/floodgate-go/floodgate/internal/shoppb"
	"github.com/floodgate-go/floodgate/shedder"
	"github.com/floodgate-go/floodgate/tiers"
	"github.com/floodgate-go/floodgate/tiers/localfirst"
	"github.com/floodgate-go/floodgate/tiers/memstore"
	"github.com/floodgate-go/floodgate/tiers/redisstore"
)

// Policy is the demo's rate-limit policy (policy.yaml).
//
//go:embed policy.yaml
var Policy []byte

// Config tunes a demo run.
type Config struct {
	// Duration is how long traffic runs; 0 means 20 s.
	Duration time.Duration
	// RedisURL, when set, keeps rate-limit state in that Redis (through the
	// fallback store) instead of in process.
	RedisURL string
	// Progress receives one line per second while traffic runs; nil: none.
	Progress io.Writer
	// Logger receives the library's logs (breaker changes, fallback);
	// nil: discarded.
	Logger *slog.Logger
}

// Headers the demo's edge proxy (the load generator) sets and the services
// trust. A real deployment would strip them from client requests at its edge.
const (
	headerTenant   = "X-Tenant"
	headerUser     = "X-User"
	headerTier     = "X-Tier"
	headerPriority = "X-Priority"
)

// Shedder capacity and the handlers' simulated work: at capacity the
// service is saturated, and the shedder starts with test traffic at 70%.
const (
	shedCapacity = 40
	workTime     = 20 * time.Millisecond
)

// Run starts the demo services on loopback, drives the scenario at them for
// cfg.Duration, and returns the report.
func Run(ctx context.Context, cfg Config) (*Report, error) {
	if cfg.Duration == 0 {
		cfg.Duration = 20 * time.Second
	}
	if cfg.Duration < time.Second {
		return nil, fmt.Errorf("demo: duration %s is shorter than 1s", cfg.Duration)
	}
	logger := cfg.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}

	policy, err := tiers.Load(Policy)
	if err != nil {
		return nil, fmt.Errorf("demo: embedded policy: %w", err)
	}
	var (
		store     tiers.Store
		ledger    localfirst.Ledger // leases and async reports go here
		storeName = "in-process memory store"
		fb        *fallback.Store
	)
	if cfg.RedisURL != "" {
		// NewClient sets go-redis up for the fallback (deadlines from the
		// context, no retries inside the budget); any URL form go-redis
		// parses: standalone, redis+sentinel://, redis+cluster://.
		client, err := redisstore.NewClient(cfg.RedisURL)
		if err != nil {
			return nil, fmt.Errorf("demo: REDIS_URL: %w", err)
		}
		defer client.Close()
		addr := redisHost(cfg.RedisURL)
		redisstore.SetRedisLogger(logger, slog.LevelDebug) // go-redis's own lines stay out of the progress output
		pingCtx, cancel := context.WithTimeout(ctx, 2*time.Second)
		unreachable := client.Ping(pingCtx).Err()
		cancel()
		if unreachable != nil {
			// Not fatal: the breaker opens, rules decide locally, and
			// Redis takes over when it answers.
			logger.Warn("floodgate demo: Redis does not answer yet; deciding locally until it does", "addr", addr, "error", unreachable)
		}
		// Batching: the demo's concurrent callers share script calls.
		rs, err := redisstore.New(client, redisstore.WithPrefix(fmt.Sprintf("fgdemo:%d:", time.Now().UnixNano())),
			redisstore.WithBatching(2, 64))
		if err != nil {
			return nil, fmt.Errorf("demo: redis store: %w", err)
		}
		defer rs.Close()
		fb, err = fallback.New(rs, fallback.WithName("demo-redis"), fallback.WithTimeout(50*time.Millisecond), fallback.WithLogger(logger))
		if err != nil {
			return nil, fmt.Errorf("demo: fallback store: %w", err)
		}
		store, ledger = fb, rs
		storeName = "Redis at " + addr + " (behind the circuit-breaker fallback)"
		if unreachable != nil {
			storeName += ", unreachable at start"
		}
	} else {
		mem, err := memstore.New()
		if err != nil {
			return nil, fmt.Errorf("demo: memory store: %w", err)
		}
		store, ledger = mem, mem
	}
	// Local-first: the tenant plans are decided async and the IP safety
	// net leased (see the policy); every other rule asks the store.
	lf, err := localfirst.New(store, ledger)
	if err != nil {
		return nil, fmt.Errorf("demo: local-first store: %w", err)
	}
	defer lf.Close(context.Background())
	store = lf

	limits, err := tiers.NewLimiter(store, policy)
	if err != nil {
		return nil, fmt.Errorf("demo: limiter: %w", err)
	}
	shed, err := shedder.New(shedCapacity)
	if err != nil {
		return nil, fmt.Errorf("demo: shedder: %w", err)
	}
	conc, err := concurrency.New(
		concurrency.WithGlobal(2*shedCapacity),
		concurrency.WithPerKey(concurrency.PerKey{
			Name: "per-user-in-flight",
			Cap:  8,
			Key: func(r *floodgate.Request) (string, bool) {
				return r.Identity.User, r.Identity.User != ""
			},
		}),
	)
	if err != nil {
		return nil, fmt.Errorf("demo: concurrency: %w", err)
	}

	counts := &decisionCounts{}
	opts := []interceptor.Option{
		interceptor.WithTrustedProxies("127.0.0.0/8", "::1/128"),
		interceptor.WithTenant(interceptor.FromHeader(headerTenant)),
		interceptor.WithUser(interceptor.FromHeader(headerUser)),
		interceptor.WithTier(interceptor.FromHeader(headerTier)),
		interceptor.WithPriorityHeader(headerPriority),
		interceptor.WithHealthPaths("/healthz"),
		interceptor.WithObserver(counts),
	}

	// HTTP service.
	mux := http.NewServeMux()
	work := func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-time.After(workTime):
		case <-r.Context().Done():
			return
		}
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"ok":true}`+"\n")
	}
	for _, route := range []string{"POST /v1/login", "GET /v1/search", "POST /v1/payments", "POST /v1/items", "GET /v1/items/{id}"} {
		mux.HandleFunc(route, work)
	}
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "ok\n") })
	mw := interceptor.HTTP(floodgate.Chain{shed, conc, limits}, append(opts, interceptor.WithServeMux(mux))...)
	httpLn, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("demo: listen: %w", err)
	}
	httpSrv := &http.Server{Handler: mw(mux), ReadHeaderTimeout: 5 * time.Second}
	go httpSrv.Serve(httpLn)
	defer httpSrv.Close()

	// gRPC service: the same stages, one interceptor each, in chain order.
	fg, err := interceptor.New(opts...)
	if err != nil {
		return nil, fmt.Errorf("demo: interceptor: %w", err)
	}
	grpcSrv := grpc.NewServer(
		grpc.ChainUnaryInterceptor(
			fg.UnaryServer(shed),
			fg.UnaryServer(conc),
			fg.UnaryServer(limits),
		),
	)
	shoppb.RegisterShopServer(grpcSrv, shopServer{})
	grpcLn, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("demo: listen: %w", err)
	}
	go grpcSrv.Serve(grpcLn)
	defer grpcSrv.Stop()

	conn, err := grpc.NewClient(grpcLn.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, fmt.Errorf("demo: grpc client: %w", err)
	}
	defer conn.Close()

	start := time.Now()
	stats := NewStats(start)
	d := &driver{
		base:   "http://" + httpLn.Addr().String(),
		http:   &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 512, MaxConnsPerHost: 0}, Timeout: 10 * time.Second},
		shop:   shoppb.NewShopClient(conn),
		stats:  stats,
		start:  start,
		window: cfg.Duration,
	}
	runCtx, cancel := context.WithTimeout(ctx, cfg.Duration)
	defer cancel()
	progressDone := make(chan struct{})
	go func() {
		defer close(progressDone)
		if cfg.Progress != nil {
			d.progress(runCtx, cfg.Progress, shed)
		}
	}()
	d.run(runCtx, Scenario(cfg.Duration))
	<-progressDone
	if ctx.Err() != nil {
		return nil, ctx.Err()
	}

	rep := &Report{
		Store:    storeName,
		Duration: cfg.Duration,
		Rows: stats.Rows([]string{
			"tier=free", "tier=pro", "tier=enterprise",
			"priority=critical", "priority=write", "priority=read", "priority=test",
			"scenario=attack", "scenario=brute-force",
		}),
		Series: map[string][]Point{},
	}
	for _, n := range []string{"tier=free", "tier=pro", "tier=enterprise", "priority=critical", "priority=write", "priority=read", "priority=test"} {
		rep.Series[n] = stats.Series(n)
		rep.SeriesOrder = append(rep.SeriesOrder, n)
	}
	rep.Notes = counts.notes()
	if fb != nil {
		st := fb.Stats()
		rep.Notes = append(rep.Notes, fmt.Sprintf(
			"Redis fallback: breaker %s; %d store calls, %d failed (%d timed out); %d takes decided without Redis (%d allowed, %d denied); breaker opened %d times",
			st.State, st.Calls, st.Failures, st.Timeouts, st.FallbackTakesAllowed+st.FallbackTakesDenied,
			st.FallbackTakesAllowed, st.FallbackTakesDenied, st.Opened))
	}
	return rep, nil
}

// redisHost is the host part of a Redis URL, without credentials, for
// messages.
func redisHost(raw string) string {
	if u, err := url.Parse(raw); err == nil && u.Host != "" {
		return u.Host
	}
	return "(URL)"
}

// decisionCounts is the demo's own Observer: it counts decisions by stage,
// outcome and source for the report's notes.
type decisionCounts struct {
	mu sync.Mutex
	m  map[string]int
}

func (c *decisionCounts) Observe(_ context.Context, _ *floodgate.Request, d floodgate.Decision, err error) {
	k := string(d.Stage) + " " + map[bool]string{true: "allowed", false: "denied"}[d.Allowed]
	if d.Source != "" {
		k += " by " + string(d.Source)
	}
	if err != nil {
		k += " (with error)"
	}
	c.mu.Lock()
	if c.m == nil {
		c.m = map[string]int{}
	}
	c.m[k]++
	c.mu.Unlock()
}

func (c *decisionCounts) notes() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []string
	for _, stage := range []floodgate.Stage{floodgate.StageShedder, floodgate.StageConcurrency, floodgate.StageTiers} {
		var parts []string
		for k, v := range c.m {
			if strings.HasPrefix(k, string(stage)+" ") {
				parts = append(parts, fmt.Sprintf("%s: %d", strings.TrimPrefix(k, string(stage)+" "), v))
			}
		}
		if len(parts) > 0 {
			slices.Sort(parts)
			out = append(out, fmt.Sprintf("%s decisions — %s", stage, strings.Join(parts, ", ")))
		}
	}
	return out
}

type shopServer struct {
	shoppb.UnimplementedShopServer
}

func (shopServer) Login(ctx context.Context, req *shoppb.LoginRequest) (*shoppb.LoginReply, error) {
	return reply(ctx, &shoppb.LoginReply{Token: "session-" + req.GetUser()})
}

func (shopServer) Search(ctx context.Context, _ *shoppb.SearchRequest) (*shoppb.SearchReply, error) {
	return reply(ctx, &shoppb.SearchReply{Items: []string{"lamp", "desk", "chair"}})
}

func (shopServer) Pay(ctx context.Context, _ *shoppb.PayRequest) (*shoppb.PayReply, error) {
	return reply(ctx, &shoppb.PayReply{PaymentId: "paid"})
}

// reply answers with msg after the simulated work, or gives up when the
// call ends.
func reply[T any](ctx context.Context, msg *T) (*T, error) {
	select {
	case <-time.After(workTime):
		return msg, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}
