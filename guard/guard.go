package guard

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"

	"google.golang.org/grpc"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/concurrency"
	"github.com/floodgate-go/floodgate/fallback"
	"github.com/floodgate-go/floodgate/fleet"
	"github.com/floodgate-go/floodgate/interceptor"
	"github.com/floodgate-go/floodgate/internal/cooldown"
	"github.com/floodgate-go/floodgate/internal/load"
	fgotel "github.com/floodgate-go/floodgate/otel"
	"github.com/floodgate-go/floodgate/policyfile"
	"github.com/floodgate-go/floodgate/shedder"
	"github.com/floodgate-go/floodgate/tiers"
)

// Guard is the whole chain of one service, ready for its transports.
// Its methods are safe for concurrent use.
type Guard struct {
	c       *config
	ic      *interceptor.Interceptor
	chain   floodgate.Chain
	limiter *tiers.Limiter
	// The outbound stages: the cooldown, the outbound rate limits, and
	// the two as the chain outgoing calls are admitted through.
	cooldown   *cooldown.Cooldown
	outLimiter *tiers.Limiter
	outbound   floodgate.Chain
	observer   *fgotel.Observer
	targets    policyfile.Targets
	// members counts the service's live instances, and fallback guards
	// Redis (both nil in process).
	members   *fleet.Members
	fallback  *fallback.Store
	shedder   *shedder.Shedder
	storeDesc string
	// meter measures the load reported with WithLoadReports (nil
	// without).
	meter *load.Meter
	// tap says that ServerOptions decides the shedder in a gRPC tap
	// (chooseTap).
	tap bool
	// top counts the denials TopDenied reports.
	top *topObserver

	closers   []func(context.Context) error
	stop      context.CancelFunc
	watched   chan struct{}
	closeOnce sync.Once
	closeErr  error
}

// New builds the chain: the policy (every error named with its line),
// the store (an unreachable Redis is logged, not fatal: the rules decide
// locally until it answers), the stages and the interceptor. The error
// names every bad option; whatever New made before an error is closed.
// ctx bounds the first ping of Redis only.
func New(ctx context.Context, opts ...Option) (*Guard, error) {
	c, err := newConfig(opts)
	if err != nil {
		return nil, err
	}
	file, err := loadPolicy(c)
	if err != nil {
		return nil, err
	}
	g := &Guard{c: c}
	if err := g.checkLinked(file.Limits); err != nil {
		return nil, err
	}
	if err := g.build(ctx, file); err != nil {
		_ = g.Close(context.Background())
		return nil, err
	}
	g.watch()
	return g, nil
}

func loadPolicy(c *config) (*policyfile.File, error) {
	if c.policyPath != "" {
		f, err := policyfile.LoadFile(c.policyPath)
		if err != nil {
			return nil, fmt.Errorf("guard: policy %s: %w", c.policyPath, err)
		}
		return f, nil
	}
	f, err := policyfile.Load(c.policyData)
	if err != nil {
		return nil, fmt.Errorf("guard: policy: %w", err)
	}
	return f, nil
}

func (g *Guard) build(ctx context.Context, file *policyfile.File) error {
	obsOpts := []fgotel.Option{}
	if g.c.mp != nil {
		obsOpts = append(obsOpts, fgotel.WithMeterProvider(g.c.mp))
	}
	if g.c.tp != nil {
		obsOpts = append(obsOpts, fgotel.WithTracerProvider(g.c.tp))
	}
	obs, err := fgotel.New(obsOpts...)
	if err != nil {
		return fmt.Errorf("guard: observer: %w", err)
	}
	g.observer = obs
	st, err := g.newStore(ctx, file)
	if err != nil {
		return err
	}
	g.members = st.members
	g.limiter, err = tiers.NewLimiter(st.store, file.Limits)
	if err != nil {
		return fmt.Errorf("guard: rate limits: %w", err)
	}
	if err := g.newOutbound(file, st); err != nil {
		return err
	}
	stages, err := g.newStages(file, st)
	if err != nil {
		return err
	}
	g.chain = stages
	if err := g.newTop(file); err != nil {
		return err
	}
	icOpts, err := g.c.identityOptions(file.Identity)
	if err != nil {
		return err
	}
	icOpts = append(icOpts, g.c.icOpts...)
	icOpts = append(icOpts, interceptor.WithObserver(obs, g.top))
	if g.c.mux != nil {
		icOpts = append(icOpts, interceptor.WithServeMux(g.c.mux))
	}
	g.ic, err = interceptor.New(icOpts...)
	if err != nil {
		return fmt.Errorf("guard: interceptor: %w", err)
	}
	if err := g.ic.CheckIdentity(g.chain); err != nil {
		return fmt.Errorf("guard: policy: %w", err)
	}
	if err := g.chooseTap(file); err != nil {
		return err
	}
	// An outgoing call's identity is the incoming call's where the
	// outgoing headers give none: the same scopes can be filled.
	if err := g.ic.CheckIdentity(g.outLimiter); err != nil {
		return fmt.Errorf("guard: policy outbound: %w", err)
	}
	g.targets.Outbound = g.outLimiter
	g.targets.Identity = file.Identity
	if g.targets.Identity == nil {
		g.targets.Identity = &policyfile.Identity{} // a reload may not add one
	}
	return nil
}

// newStages builds the stages in chain order, each counted in flight by
// the observer, and the targets the policy watch reconfigures.
func (g *Guard) newStages(file *policyfile.File, st *stores) (floodgate.Chain, error) {
	shed, err := g.newShedder(file)
	if err != nil {
		return nil, err
	}
	global := int64(defaultMaxInFlight)
	if file.Global > 0 {
		global = file.Global
	}
	conc, err := concurrency.New(inFlightOptions(global, file)...)
	if err != nil {
		return nil, fmt.Errorf("guard: in-flight limiter: %w", err)
	}
	if file.Wait != nil {
		if err := conc.SetWait(*file.Wait); err != nil {
			return nil, fmt.Errorf("guard: policy concurrency.wait: %w", err)
		}
	}
	g.shedder = shed
	g.targets = policyfile.Targets{Limits: g.limiter, Shedder: shed, Concurrency: conc}
	var fleet, adaptive floodgate.Admitter
	if file.Fleet != nil {
		fs, err := g.fleetShedder(file, st)
		if err != nil {
			return nil, err
		}
		g.targets.Fleet, fleet = fs, fs
	}
	if file.Adaptive != nil {
		a, err := concurrency.NewAdaptive(*file.Adaptive)
		if err != nil {
			return nil, fmt.Errorf("guard: policy concurrency.adaptive: %w", err)
		}
		g.targets.Adaptive, adaptive = a, a
	}
	// With load reports, the stages that refuse for overload are counted
	// (metered), the first one counting every request.
	count := func(a floodgate.Admitter, first bool) floodgate.Admitter {
		a = g.observer.TrackInFlight(a)
		if g.meter == nil {
			return a
		}
		return metered{a: a, m: g.meter, first: first}
	}
	if g.c.loadReports {
		g.meter = g.newMeter(shed, conc, g.targets.Adaptive)
	}
	chain := floodgate.Chain{count(shed, true)}
	if fleet != nil {
		chain = append(chain, count(fleet, false))
	}
	chain = append(chain, count(conc, false))
	if adaptive != nil {
		chain = append(chain, count(adaptive, false))
	}
	return append(chain, g.observer.TrackInFlight(g.limiter)), nil
}

// watch starts the policy file's watch, until Close.
func (g *Guard) watch() {
	if g.c.policyPath == "" {
		return
	}
	ctx, stop := context.WithCancel(context.Background())
	g.stop, g.watched = stop, make(chan struct{})
	go func() {
		defer close(g.watched)
		err := policyfile.Watch(ctx, g.c.policyPath, g.targets,
			policyfile.WithInterval(g.c.interval), policyfile.WithLogger(g.c.logger),
			policyfile.WithOnReload(func(f *policyfile.File, err error) {
				if err == nil {
					g.setCooldown(f)
				}
			}))
		if err != nil && !errors.Is(err, context.Canceled) {
			g.c.logger.Error("floodgate: policy watch stopped", "path", g.c.policyPath, "err", err)
		}
	}()
}

// HTTP returns next behind the whole chain: shed, in-flight, rate limits.
// Denied requests get 503 or 429 with Retry-After and the RateLimit
// headers (see package interceptor).
func (g *Guard) HTTP(next http.Handler) http.Handler {
	return g.ic.HTTP(g.chain)(next)
}

// UnaryServer returns the gRPC unary server interceptor of the whole
// chain, for a grpc.ChainUnaryInterceptor of one's own.
func (g *Guard) UnaryServer() grpc.UnaryServerInterceptor { return g.ic.UnaryServer(g.chain) }

// StreamServer returns the gRPC stream server interceptor of the whole
// chain.
func (g *Guard) StreamServer() grpc.StreamServerInterceptor { return g.ic.StreamServer(g.chain) }

// ServerOptions returns the gRPC server options that put the whole chain
// in front of every unary and streaming call: grpc.NewServer(g.ServerOptions()...).
//
// The shedder decides early: a grpc.InTapHandle
// (interceptor.Interceptor.TapHandle) admits every call through it when
// the call's headers arrive, before its message is read and decoded and
// before a handler goroutine starts, so a shed call costs the server
// little more than its headers; it gets the UNAVAILABLE status and
// details the interceptor would send (without the
// grpc-retry-pushback-ms trailer: the delay is in the status's
// RetryInfo). The other stages (the fleet-wide shedder, the in-flight
// limiters, the rate limits) still run in the interceptors, after the
// message is decoded, so identities read from the message apply to them;
// the interceptors take the tap's admission as the shedder's and end it
// with the call. A server may hold one tap handle only: one of its own
// needs the chain from UnaryServer and StreamServer instead.
//
// With WithLoadReports, every call's trailer also carries the ORCA load
// report, from an interceptor before the chain's; a tap sends no
// trailer, so then the shedder decides in the interceptors, and a shed
// call's trailer tells its client how loaded the replica is. So it does
// when the policy's shedder: fairness: is by an identity read from a
// claim, which a tap cannot see (the auth middleware has not run); a
// reload that sets such a fairness while the tap decides is refused.
func (g *Guard) ServerOptions() []grpc.ServerOption {
	var opts []grpc.ServerOption
	if g.tap {
		opts = []grpc.ServerOption{grpc.InTapHandle(g.ic.TapHandle(g.chain[0]))}
	} else if g.meter != nil {
		opts = g.perCallOptions()
	}
	return append(opts,
		grpc.ChainUnaryInterceptor(g.UnaryServer()),
		grpc.ChainStreamInterceptor(g.StreamServer()),
	)
}

// DialOptions returns the gRPC client options that honour a server's
// pushback: a call refused with a retry delay waits it and retries
// (interceptor.UnaryClient, StreamClient), with opts for attempts,
// jitter and client-side throttling. Each attempt then goes through the
// policy's outbound: section, as RoundTripper's requests do (the method is
// the gRPC full method, the cooldown's target its service): a refused
// attempt is not sent nor retried (RESOURCE_EXHAUSTED with RetryInfo,
// interceptor.IsClientThrottled), and a RESOURCE_EXHAUSTED or UNAVAILABLE
// with a retry delay stops the fleet's calls to that service for the
// delay. Without an outbound: section an attempt goes straight to the
// connection, untouched by the outbound stages (and unrecorded by their
// telemetry), at the cost of two atomic loads; a reload that adds the
// section applies it from the next attempt.
func (g *Guard) DialOptions(opts ...interceptor.ClientOption) []grpc.DialOption {
	return append([]grpc.DialOption{
		grpc.WithChainUnaryInterceptor(interceptor.UnaryClient(opts...)),
		grpc.WithChainStreamInterceptor(interceptor.StreamClient(opts...)),
	}, g.outboundDialOptions()...)
}

// Interceptor and Chain are what connectmw.NewHandler takes:
// connectmw.NewHandler(g.Interceptor(), g.Chain()).
func (g *Guard) Interceptor() *interceptor.Interceptor { return g.ic }

// Chain returns the stages in order, as one floodgate.Admitter.
func (g *Guard) Chain() floodgate.Admitter { return g.chain }

// Limiter returns the rate-limit stage, for what it can tell (its policy,
// Inspect) and hot reloads of one's own.
func (g *Guard) Limiter() *tiers.Limiter { return g.limiter }

// Shedder returns the priority load shedder, the chain's first stage, for
// what it can tell (InFlight, Capacity); the policy file's shedder:
// section configures it.
func (g *Guard) Shedder() *shedder.Shedder { return g.shedder }

// Fallback returns the store guarding Redis: its circuit breaker's State
// and its counters (Stats: calls, failures, decisions made without
// Redis). It is nil in process (WithInProcess), where there is no Redis
// to guard. WithOnBreakerChange tells the breaker's changes as they
// happen.
func (g *Guard) Fallback() *fallback.Store { return g.fallback }

// Store says where the rate limits are kept, for a startup line, with
// the password masked (redisstore.Redact): "Redis at
// redis://10.0.0.7:6379 (...)" or "in process".
func (g *Guard) Store() string { return g.storeDesc }

// Close stops the policy watch and shuts the stores down in the order
// that loses no unit (see the package doc), within ctx. It returns every
// error met; a second Close does nothing.
func (g *Guard) Close(ctx context.Context) error {
	g.closeOnce.Do(func() {
		if g.stop != nil {
			g.stop()
			<-g.watched
		}
		var errs []error
		for i := len(g.closers) - 1; i >= 0; i-- {
			errs = append(errs, g.closers[i](ctx))
		}
		g.closeErr = errors.Join(errs...)
	})
	return g.closeErr
}
