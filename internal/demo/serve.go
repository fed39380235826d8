package demo

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/floodgate-go/floodgate/guard"
	"github.com/floodgate-go/floodgate/interceptor"
	"github.com/floodgate-go/floodgate/internal/shoppb"
	"github.com/floodgate-go/floodgate/tiers/redisstore"
)

// TopPath is where the demo's admin listener serves the guard's denial
// summary (guard.Guard.TopDeniedHandler), for `floodgate top -url`.
const TopPath = "/debug/floodgate/top"

// Service is the demo's services running on loopback: the HTTP and gRPC
// shop behind one guard, and an admin listener serving the guard's
// denial summary (never behind the guard, as a service's pprof).
type Service struct {
	// Guard is the chain in front of both services.
	Guard *guard.Guard
	// URL is the HTTP service's base URL, TopURL the denial endpoint's.
	URL, TopURL string

	store  string // where the rate limits are kept, for the report
	client *http.Client
	conn   *grpc.ClientConn
	closes []func()
}

// Serve starts the demo's services on loopback with cfg's store (in
// process, or cfg.RedisURL; cfg.Fault is not used), for a test or a tool
// to drive with Send; Close stops them.
func Serve(ctx context.Context, cfg Config) (*Service, error) {
	cfg, logger, err := cfg.prepare()
	if err != nil {
		return nil, err
	}
	return startService(ctx, cfg, logger, newTimeline(axisFor(cfg.Duration)), false)
}

// Close stops the services and closes the guard, in the order that
// loses no unit (the guard after the servers, the Redis client last).
func (s *Service) Close() {
	for i := len(s.closes) - 1; i >= 0; i-- {
		s.closes[i]()
	}
	s.closes = nil
}

// startService starts the services, observed by tl; own says that the Redis
// of cfg.RedisURL is one the demo started (the report says so).
func startService(ctx context.Context, cfg Config, logger *slog.Logger, tl *timeline, own bool) (_ *Service, err error) {
	s := &Service{}
	defer func() {
		if err != nil {
			s.Close()
		}
	}()
	mux := shopMux()
	// The chain comes from package guard, as a service's would: the
	// policy (with its shedder:, concurrency: and identity: sections), the
	// store, the stages in order. The demo is one process: it holds every
	// limit whole, as a fleet of one counts one live instance.
	gopts := []guard.Option{
		guard.WithPolicy(Policy),
		guard.WithLogger(logger),
		guard.WithServeMux(mux),
		guard.WithInterceptor(
			interceptor.WithPriorityHeader(headerPriority),
			interceptor.WithHealthPaths("/healthz"),
			interceptor.WithObserver(tl),
		),
	}
	s.store = "in-process memory store"
	if cfg.RedisURL != "" {
		// NewClient sets go-redis up for the fallback (deadlines from the
		// context, no retries inside the budget); any URL form go-redis
		// parses: standalone, redis+sentinel://, redis+cluster://.
		client, err := redisstore.NewClient(cfg.RedisURL)
		if err != nil {
			return nil, fmt.Errorf("demo: REDIS_URL: %w", err)
		}
		s.closes = append(s.closes, func() { client.Close() }) // after the guard's Close
		addr := redisHost(cfg.RedisURL)
		pingCtx, cancel := context.WithTimeout(ctx, 2*time.Second)
		unreachable := client.Ping(pingCtx).Err()
		cancel()
		// Not fatal: the breaker opens, rules decide locally, and Redis
		// takes over when it answers (guard logs it).
		s.store = "Redis at " + addr + " (behind the circuit-breaker fallback)"
		if own {
			s.store = "redis-server started by the demo at " + addr + " (behind the circuit-breaker fallback)"
		}
		if unreachable != nil {
			s.store += ", unreachable at start"
		}
		gopts = append(gopts,
			guard.WithRedisClient(client),
			guard.WithService("floodgate-demo"),
			// Each run has buckets and a fleet of its own, so that runs on
			// one Redis start alike.
			guard.WithKeyPrefix(fmt.Sprintf("fgdemo:%d:", time.Now().UnixNano())),
			guard.WithStoreTimeout(50*time.Millisecond),
			guard.WithOnBreakerChange(tl.breakerChanged),
		)
	} else {
		gopts = append(gopts, guard.WithInProcess())
	}
	g, err := guard.New(ctx, gopts...)
	if err != nil {
		return nil, fmt.Errorf("demo: %w", err)
	}
	s.Guard = g
	// The hand-over at exit: the local-first store reports, and what the
	// fallback admitted locally while Redis was away goes to Redis.
	s.closes = append(s.closes, func() {
		if err := g.Close(context.Background()); err != nil {
			logger.Warn("floodgate demo: closing the guard", "error", err)
		}
	})
	if c := g.Shedder().Capacity(); c != shedCapacity {
		return nil, fmt.Errorf("demo: policy.yaml's shedder capacity is %d; the report and the comparison say %d", c, shedCapacity)
	}
	if err := s.listen(g, mux); err != nil {
		return nil, err
	}
	return s, nil
}

// shopMux is the HTTP service's routes.
func shopMux() *http.ServeMux {
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
	return mux
}

// listen serves the HTTP service, the gRPC service and the admin
// listener on loopback, and dials the gRPC service.
func (s *Service) listen(g *guard.Guard, mux *http.ServeMux) error {
	httpLn, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return fmt.Errorf("demo: listen: %w", err)
	}
	httpSrv := &http.Server{Handler: g.HTTP(mux), ReadHeaderTimeout: 5 * time.Second}
	go httpSrv.Serve(httpLn)
	s.closes = append(s.closes, func() { httpSrv.Close() })
	s.URL = "http://" + httpLn.Addr().String()
	s.client = &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 512, MaxConnsPerHost: 0}, Timeout: 10 * time.Second}

	// The admin listener: who is denied, for floodgate top.
	admin := http.NewServeMux()
	admin.Handle("GET "+TopPath, g.TopDeniedHandler())
	adminLn, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return fmt.Errorf("demo: listen: %w", err)
	}
	adminSrv := &http.Server{Handler: admin, ReadHeaderTimeout: 5 * time.Second}
	go adminSrv.Serve(adminLn)
	s.closes = append(s.closes, func() { adminSrv.Close() })
	s.TopURL = "http://" + adminLn.Addr().String() + TopPath

	// gRPC service: the same chain.
	grpcSrv := grpc.NewServer(g.ServerOptions()...)
	shoppb.RegisterShopServer(grpcSrv, shopServer{})
	grpcLn, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return fmt.Errorf("demo: listen: %w", err)
	}
	go grpcSrv.Serve(grpcLn)
	s.closes = append(s.closes, grpcSrv.Stop)
	conn, err := grpc.NewClient(grpcLn.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return fmt.Errorf("demo: grpc client: %w", err)
	}
	s.conn = conn
	s.closes = append(s.closes, func() { conn.Close() })
	return nil
}

// Send sends n requests of g's traffic (its route, identity and
// priority; its Users and IPs in turn), at most parallel at once, and
// returns how each ended. It stops early when ctx ends; each request is
// bounded by the client's timeout (10 s).
func (s *Service) Send(ctx context.Context, g Generator, n, parallel int) [numOutcomes]int {
	d := &driver{base: s.URL, http: s.client, shop: shoppb.NewShopClient(s.conn)}
	var out [numOutcomes]int
	var mu sync.Mutex
	var wg sync.WaitGroup
	sem := make(chan struct{}, max(parallel, 1))
	for i := range n {
		select {
		case <-ctx.Done():
		case sem <- struct{}{}:
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer func() { <-sem }()
				user, ip := g.Users[i%len(g.Users)], g.IPs[i%len(g.IPs)]
				var o Outcome
				if strings.HasPrefix(g.Route, "/") {
					o = d.sendGRPC(ctx, &g, user, ip)
				} else {
					o = d.sendHTTP(ctx, &g, user, ip, i)
				}
				mu.Lock()
				out[o]++
				mu.Unlock()
			}()
			continue
		}
		break
	}
	wg.Wait()
	return out
}
