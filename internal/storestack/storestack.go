// Package storestack builds the store stack a rate limiter decides with,
// the one package guard and the floodgate-rls command both run, so that
// the two cannot drift apart.
//
// What this package decides:
//
//   - in process (Config.InProcess): a memory store, timed by the
//     observer, behind a local-first store for the leased and async rules;
//   - with Redis (Config.URL or Config.Client): the Redis store (batching
//     2 calls of up to 64 takes in flight, Config.KeyPrefix before every
//     bucket key) timed by the observer, guarded by package fallback's
//     circuit breaker with its local limiters, and the local-first store
//     above it, leasing from and reporting to the Redis store (the
//     ledger). An unreachable Redis at New is logged, not fatal;
//   - the share of each instance, in the fallback's local limiters and
//     the local-first leases: by default the live instances of
//     Config.Service, counted by heartbeats in the same Redis (package
//     fleet, key Config.KeyPrefix+"fg:fleet:{SERVICE}" unless
//     Config.FleetKey names another), so N instances with Redis down admit
//     each limit once, not N times; a fixed count only when
//     Config.Instances says so;
//   - the breaker's changes go to the observer, then to Config.OnBreaker;
//     the local-first store's gauges to the observer;
//   - Close's order, the one that loses no unit: the local-first store
//     reports and returns its leases, the fallback hands what it admitted
//     locally over to Redis, the fleet is left, then the Redis store and
//     (when New made it) the client close.
package storestack

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/sony/gobreaker/v2"

	"github.com/floodgate-go/floodgate/fallback"
	"github.com/floodgate-go/floodgate/fleet"
	fgotel "github.com/floodgate-go/floodgate/otel"
	"github.com/floodgate-go/floodgate/quota"
	"github.com/floodgate-go/floodgate/tiers/localfirst"
	"github.com/floodgate-go/floodgate/tiers/memstore"
	"github.com/floodgate-go/floodgate/tiers/redisstore"
)

// HandOver bounds how long Close gives the local-first store to report
// and the fallback to hand what it admitted locally over to Redis, each.
const HandOver = 2 * time.Second

// Config says which stack New builds.
type Config struct {
	// InProcess keeps the buckets in this process (a memory store); then
	// URL, Client, KeyPrefix, FleetKey and OnBreaker must be empty.
	InProcess bool
	// URL names the Redis server (redisstore.NewClient); New makes the
	// client and Close closes it. Give exactly one of InProcess, URL and
	// Client.
	URL string
	// Client is a Redis client of the caller's, who closes it after Close.
	Client redis.UniversalClient
	// Service names the fleet whose live instances share each limit;
	// required when Instances is 0 with Redis.
	Service string
	// KeyPrefix goes before every bucket key (redisstore.WithPrefix) and
	// before the default fleet key; it must not hold '{' or '}'.
	KeyPrefix string
	// FleetKey is the Redis key of the member set; empty:
	// KeyPrefix+"fg:fleet:{"+Service+"}".
	FleetKey string
	// Timeout is the budget of one Redis call before the fallback decides
	// locally; 0: fallback.DefaultTimeout.
	Timeout time.Duration
	// Instances is how many instances share each limit: 0 counts the live
	// instances of Service by heartbeats in Redis (1 in process); N >= 1
	// is a fixed count.
	Instances int
	// Logger receives the stack's logs, and go-redis's at debug level;
	// nil: slog.Default().
	Logger *slog.Logger
	// Observer times the store's calls and records the breaker's state and
	// the local-first gauges; required.
	Observer *fgotel.Observer
	// OnBreaker, when set, is called on each change of the breaker's
	// state, after the observer.
	OnBreaker func(name string, from, to gobreaker.State)
}

// Stack is what New built.
type Stack struct {
	// Store is what the limiter decides with: the local-first store on
	// top of the stack.
	Store quota.Store
	// Ledger is the store where the buckets live, beneath the fallback
	// and the local-first store (the memory store or the Redis store):
	// what a quota server charges.
	Ledger quota.Reporter
	// Fallback guards Redis; nil in process.
	Fallback *fallback.Store
	// Members counts the service's live instances; nil in process and
	// with a fixed Instances.
	Members *fleet.Members
	// Client is the Redis client (URL's or Client); nil in process.
	Client redis.UniversalClient
	// Desc says where the buckets are kept, for a startup line, with the
	// password masked: "in process" or "Redis at ... (...)".
	Desc string

	closers []func(context.Context) error
}

// URLError is New's error for a Config.URL the Redis client refuses, so
// that a caller can name its own option or flag for it.
type URLError struct {
	// Err is redisstore.NewClient's error.
	Err error
}

// Error says the URL is bad, and why.
func (e *URLError) Error() string { return "redis URL: " + e.Err.Error() }

// Unwrap returns Err.
func (e *URLError) Unwrap() error { return e.Err }

func (c *Config) check() error {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	stores := 0
	for _, b := range []bool{c.InProcess, c.URL != "", c.Client != nil} {
		if b {
			stores++
		}
	}
	if stores != 1 {
		bad("give exactly one of InProcess, URL and Client (%d given)", stores)
	}
	if c.Observer == nil {
		bad("nil Observer")
	}
	if c.Instances < 0 {
		bad("Instances %d is negative (0 counts the live instances, N >= 1 is fixed)", c.Instances)
	}
	if strings.ContainsAny(c.KeyPrefix, "{}") {
		bad("KeyPrefix %q holds '{' or '}', which would change the keys' Redis Cluster hash tags", c.KeyPrefix)
	}
	if c.InProcess && (c.KeyPrefix != "" || c.FleetKey != "" || c.OnBreaker != nil) {
		bad("KeyPrefix, FleetKey and OnBreaker need Redis: in process there are no keys and no breaker")
	}
	if !c.InProcess && c.Instances == 0 && c.Service == "" && c.FleetKey == "" {
		bad("Service is required to count the live instances (or a fixed Instances)")
	}
	return errors.Join(errs...)
}

// New builds the stack of c. Whatever it made before an error is closed.
// ctx bounds the first ping of Redis only.
func New(ctx context.Context, c Config) (*Stack, error) {
	if err := c.check(); err != nil {
		return nil, fmt.Errorf("storestack: %w", err)
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	s := &Stack{}
	if err := s.build(ctx, c); err != nil {
		_ = s.Close(context.Background())
		return nil, err
	}
	return s, nil
}

func (s *Stack) build(ctx context.Context, c Config) error {
	if c.InProcess {
		mem, err := memstore.New()
		if err != nil {
			return fmt.Errorf("memory store: %w", err)
		}
		s.Ledger, s.Desc = mem, "in process"
		n := max(c.Instances, 1)
		return s.localFirst(c, c.Observer.Store(mem), mem, func() int { return n })
	}
	// go-redis's own lines (failed dials, many a second while Redis is
	// down) go to the logger at debug level: the breaker's state changes
	// and the fallback's warnings say what matters once.
	redisstore.SetRedisLogger(c.Logger, slog.LevelDebug)
	s.Client = c.Client
	addr := "a caller's client"
	if s.Client == nil {
		client, err := redisstore.NewClient(c.URL)
		if err != nil {
			return &URLError{Err: err}
		}
		s.Client = client
		s.closers = append(s.closers, func(context.Context) error { return client.Close() })
		addr = redisstore.Redact(c.URL)
	}
	pingCtx, cancel := context.WithTimeout(ctx, 2*time.Second)
	unreachable := s.Client.Ping(pingCtx).Err()
	cancel()
	if unreachable != nil {
		c.Logger.Warn("floodgate: Redis does not answer yet; deciding locally until it does", "redis", addr, "err", unreachable)
	}
	rsOpts := []redisstore.Option{redisstore.WithBatching(2, 64)}
	if c.KeyPrefix != "" {
		rsOpts = append(rsOpts, redisstore.WithPrefix(c.KeyPrefix))
	}
	rs, err := redisstore.New(s.Client, rsOpts...)
	if err != nil {
		return fmt.Errorf("redis store: %w", err)
	}
	s.closers = append(s.closers, func(context.Context) error { return rs.Close() })
	s.Ledger = rs
	instances, shared := func() int { return c.Instances }, strconv.Itoa(c.Instances)+" instances (fixed)"
	if c.Instances == 0 {
		if err := s.join(c); err != nil {
			return err
		}
		instances, shared = s.Members.Count, "the live instances of "+c.Service
	}
	timeout := c.Timeout
	if timeout == 0 {
		timeout = fallback.DefaultTimeout
	}
	guarded, err := fallback.New(c.Observer.Store(rs),
		fallback.WithName("redis"),
		fallback.WithTimeout(timeout),
		fallback.WithInstances(instances),
		fallback.WithLogger(c.Logger),
		fallback.WithOnStateChange(func(name string, from, to gobreaker.State) {
			c.Observer.BreakerStateChanged(name, from.String(), to.String())
			if c.OnBreaker != nil {
				c.OnBreaker(name, from, to)
			}
		}),
	)
	if err != nil {
		return fmt.Errorf("fallback store: %w", err)
	}
	s.closers = append(s.closers, func(ctx context.Context) error {
		ctx, cancel := context.WithTimeout(ctx, HandOver)
		defer cancel()
		return guarded.Close(ctx)
	})
	s.Fallback = guarded
	s.Desc = "Redis at " + addr + " (circuit breaker, local fallback shared by " + shared + ")"
	return s.localFirst(c, guarded, rs, instances)
}

// join counts the live instances of the service by heartbeats in Redis,
// until Close, which leaves the fleet.
func (s *Stack) join(c Config) error {
	key := c.FleetKey
	if key == "" {
		key = c.KeyPrefix + "fg:fleet:{" + c.Service + "}"
	}
	m, err := fleet.New(s.Client, fleet.WithKey(key), fleet.WithLogger(c.Logger))
	if err != nil {
		return fmt.Errorf("fleet membership: %w", err)
	}
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = m.Run(ctx) // returns ctx's error once it has left the fleet
	}()
	s.closers = append(s.closers, func(context.Context) error { stop(); <-done; return nil })
	s.Members = m
	return nil
}

// localFirst puts the local-first store in front of exact, leasing from
// and reporting to ledger.
func (s *Stack) localFirst(c Config, exact quota.Store, ledger quota.Reporter, instances func() int) error {
	lf, err := localfirst.New(exact, ledger, localfirst.WithInstances(instances), localfirst.WithLogger(c.Logger))
	if err != nil {
		return fmt.Errorf("local-first store: %w", err)
	}
	s.closers = append(s.closers, func(ctx context.Context) error {
		ctx, cancel := context.WithTimeout(ctx, HandOver)
		defer cancel()
		return lf.Close(ctx)
	})
	unregister, err := c.Observer.ObserveLocalFirst(lf.Stats)
	if err != nil {
		return fmt.Errorf("local-first metrics: %w", err)
	}
	s.closers = append(s.closers, func(context.Context) error { unregister(); return nil })
	s.Store = lf
	return nil
}

// Close shuts the stack down in the order that loses no unit (see the
// package doc), within ctx, and returns every error met. Call it once.
func (s *Stack) Close(ctx context.Context) error {
	var errs []error
	for i := len(s.closers) - 1; i >= 0; i-- {
		errs = append(errs, s.closers[i](ctx))
	}
	s.closers = nil
	return errors.Join(errs...)
}
