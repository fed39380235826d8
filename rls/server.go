package rls

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net"
	"sync"
	"sync/atomic"
	"time"

	extrlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/quota"
	"github.com/floodgate-go/floodgate/tiers"
)

// ServiceName is the full name of the gRPC service Server implements, as
// the health service reports it.
const ServiceName = "envoy.service.ratelimit.v3.RateLimitService"

// DefaultDrainTimeout is how long Serve waits for calls in flight when it
// shuts down, unless WithDrainTimeout says otherwise.
const DefaultDrainTimeout = 10 * time.Second

// Server implements envoy.service.ratelimit.v3.RateLimitService over a
// tiers.Limiter; see the package documentation for what it decides. It is
// safe for concurrent use.
type Server struct {
	rlsv3.UnimplementedRateLimitServiceServer
	limiter *tiers.Limiter
	cfg     config
	pool    sync.Pool
	limits  limitCache
	lastLog atomic.Int64 // unix nanos of the last logged store error
}

// Option configures a Server.
type Option func(*config)

type config struct {
	obs     floodgate.Observer
	logger  *slog.Logger
	headers bool
	drain   time.Duration
	quota   *QuotaServer
	errs    []error
}

// WithObserver reports every descriptor's decision to o (package otel's
// Observer, for instance). nil (the default) reports nothing.
func WithObserver(o floodgate.Observer) Option {
	return func(c *config) { c.obs = o }
}

// WithLogger sets where store failures and refused calls are logged
// (default slog.Default(); at most one line a second). It must not be nil.
func WithLogger(l *slog.Logger) Option {
	return func(c *config) {
		if l == nil {
			c.errs = append(c.errs, errors.New("rls: WithLogger: logger is nil"))
			return
		}
		c.logger = l
	}
}

// WithResponseHeaders sets whether answers carry the RateLimit-Policy,
// RateLimit and Retry-After response headers (default true).
func WithResponseHeaders(on bool) Option {
	return func(c *config) { c.headers = on }
}

// WithDrainTimeout sets how long Serve waits, at shutdown, for calls in
// flight before it closes their connections (default
// DefaultDrainTimeout; must be > 0).
func WithDrainTimeout(d time.Duration) Option {
	return func(c *config) {
		if d <= 0 {
			c.errs = append(c.errs, fmt.Errorf("rls: WithDrainTimeout: %s must be > 0", d))
			return
		}
		c.drain = d
	}
}

// WithQuota serves q, Envoy's rate limit quota service (RLQS), next to
// the rate limit service: Register and Serve add it, and at shutdown Serve
// ends its streams before it drains the calls in flight. Closing q is the
// caller's. It must not be nil.
func WithQuota(q *QuotaServer) Option {
	return func(c *config) {
		if q == nil {
			c.errs = append(c.errs, errors.New("rls: WithQuota: quota server is nil"))
			return
		}
		c.quota = q
	}
}

// New returns a Server deciding with l. Bad options are reported together.
func New(l *tiers.Limiter, opts ...Option) (*Server, error) {
	c := config{logger: slog.Default(), headers: true, drain: DefaultDrainTimeout}
	if l == nil {
		c.errs = append(c.errs, errors.New("rls: New: limiter is nil"))
	}
	for _, o := range opts {
		if o == nil {
			c.errs = append(c.errs, errors.New("rls: nil Option"))
			continue
		}
		o(&c)
	}
	if len(c.errs) > 0 {
		return nil, errors.Join(c.errs...)
	}
	s := &Server{limiter: l, cfg: c}
	s.pool.New = func() any { return new(callScratch) }
	return s, nil
}

// Register adds the rate limit service to g, and the quota service of
// WithQuota.
func (s *Server) Register(g grpc.ServiceRegistrar) {
	rlsv3.RegisterRateLimitServiceServer(g, s)
	if s.cfg.quota != nil {
		s.cfg.quota.Register(g)
	}
}

// Serve serves the rate limit service (and the quota service of
// WithQuota) and the gRPC health service (grpc.health.v1, SERVING for "",
// ServiceName and, with WithQuota, QuotaServiceName) on lis until ctx is
// done, then shuts down gracefully: health turns NOT_SERVING, the quota
// streams end (their clients reconnect), new calls are refused, calls in
// flight finish within the drain timeout (then their connections are
// closed), and Serve returns nil. It returns the
// error of a listener that fails. opts configure the grpc.Server; its
// codec is proto's, except that a RateLimitRequest is decoded with a few
// allocations instead of one per descriptor, entry and string (into the
// same message, which interceptors see as usual; unknown fields are
// dropped). An option of opts that forces a codec replaces it.
func (s *Server) Serve(ctx context.Context, lis net.Listener, opts ...grpc.ServerOption) error {
	g := grpc.NewServer(append([]grpc.ServerOption{grpc.ForceServerCodecV2(newWireCodec())}, opts...)...)
	s.Register(g)
	hs := health.NewServer()
	hs.SetServingStatus("", healthpb.HealthCheckResponse_SERVING)
	hs.SetServingStatus(ServiceName, healthpb.HealthCheckResponse_SERVING)
	if s.cfg.quota != nil {
		hs.SetServingStatus(QuotaServiceName, healthpb.HealthCheckResponse_SERVING)
	}
	healthpb.RegisterHealthServer(g, hs)

	served := make(chan error, 1)
	go func() { served <- g.Serve(lis) }()
	select {
	case err := <-served:
		hs.Shutdown()
		return err
	case <-ctx.Done():
	}
	hs.Shutdown() // NOT_SERVING for every service; watchers are told
	if s.cfg.quota != nil {
		s.cfg.quota.endStreams() // long-lived: they would hold the drain to its timeout
	}
	stopped := make(chan struct{})
	go func() {
		g.GracefulStop()
		close(stopped)
	}()
	t := time.NewTimer(s.cfg.drain)
	defer t.Stop()
	select {
	case <-stopped:
	case <-t.C:
		s.cfg.logger.Warn("floodgate-rls: calls still in flight after the drain timeout; closing their connections", "drain_timeout", s.cfg.drain)
		g.Stop()
		<-stopped
	}
	if err := <-served; err != nil && !errors.Is(err, grpc.ErrServerStopped) {
		return err
	}
	return nil
}

// callScratch is what one call needs besides the response; pooled.
type callScratch struct {
	ds      []tiers.Descriptor
	entries []tiers.DescriptorEntry
	out     []tiers.DescriptorDecision
	limits  []quota.Limit // the descriptors' own limits (overrides)
}

// ShouldRateLimit implements RateLimitServiceServer.
func (s *Server) ShouldRateLimit(ctx context.Context, req *rlsv3.RateLimitRequest) (*rlsv3.RateLimitResponse, error) {
	cs := s.pool.Get().(*callScratch)
	defer s.release(cs)
	if err := cs.convert(req); err != nil {
		return nil, s.refused(err)
	}
	d, err := s.limiter.AdmitDescriptors(ctx, req.GetDomain(), cs.ds, cs.out)
	if err != nil {
		s.logf("floodgate-rls: call decided with an error", err)
	}
	s.observe(ctx, cs, &d, err)
	return s.response(cs.out, &d), nil
}

// refused logs a call refused for bad input and returns its error. It is
// a call of its own, never inlined, so that a call that decides keeps a
// small frame (see tiers/localfirst's takeLocal).
//
//go:noinline
func (s *Server) refused(err error) error {
	s.logf("floodgate-rls: call refused", err)
	return status.Error(codes.InvalidArgument, err.Error())
}

func (s *Server) release(cs *callScratch) {
	clear(cs.ds)
	clear(cs.entries)
	clear(cs.out)
	cs.limits = cs.limits[:0]
	if cap(cs.entries) > 4096 {
		return
	}
	s.pool.Put(cs)
}

// convert checks req and turns its descriptors into cs.ds.
func (cs *callScratch) convert(req *rlsv3.RateLimitRequest) error {
	if req.GetDomain() == "" {
		return errors.New("domain is empty")
	}
	descs := req.GetDescriptors()
	switch {
	case len(descs) == 0:
		return errors.New("descriptors is empty")
	case len(descs) > tiers.MaxDescriptors:
		return fmt.Errorf("%d descriptors; at most %d", len(descs), tiers.MaxDescriptors)
	}
	n, nlim := 0, 0
	for i, d := range descs {
		if len(d.GetEntries()) == 0 {
			return fmt.Errorf("descriptors[%d] has no entries", i)
		}
		if d.GetLimit() != nil {
			nlim++
		}
		n += len(d.GetEntries())
	}
	if nlim > 0 {
		cs.limits = growTo(cs.limits, nlim)[:0]
	}
	cs.ds = growTo(cs.ds, len(descs))
	cs.out = growTo(cs.out, len(descs))
	cs.entries = growTo(cs.entries, n)[:0]
	callCost := max(int64(req.GetHitsAddend()), 1)
	for i, d := range descs {
		start := len(cs.entries)
		for _, e := range d.GetEntries() {
			cs.entries = append(cs.entries, tiers.DescriptorEntry{Key: e.GetKey(), Value: e.GetValue()})
		}
		td := tiers.Descriptor{Entries: cs.entries[start:len(cs.entries):len(cs.entries)], Cost: callCost, GiveBack: d.GetIsNegativeHits()}
		if o := d.GetLimit(); o != nil {
			l, err := overrideLimit(o)
			if err != nil {
				return fmt.Errorf("descriptors[%d].limit: %w", i, err)
			}
			cs.limits = append(cs.limits, l)
			td.Limit = &cs.limits[len(cs.limits)-1]
		}
		if h := d.GetHitsAddend(); h != nil {
			switch v := h.GetValue(); {
			case v == 0:
				td.Cost, td.Peek = 0, true
			case v > math.MaxInt64:
				td.Cost = math.MaxInt64
			default:
				td.Cost = int64(v)
			}
		}
		cs.ds[i] = td
	}
	return nil
}

// overrideUnits are the periods of Envoy's rate limit units, by value.
var overrideUnits = [...]time.Duration{
	typev3.RateLimitUnit_SECOND: time.Second,
	typev3.RateLimitUnit_MINUTE: time.Minute,
	typev3.RateLimitUnit_HOUR:   time.Hour,
	typev3.RateLimitUnit_DAY:    24 * time.Hour,
	typev3.RateLimitUnit_MONTH:  30 * 24 * time.Hour, // envoyproxy/ratelimit's month and year
	typev3.RateLimitUnit_YEAR:   365 * 24 * time.Hour,
}

// overrideLimit is a descriptor's limit override as a limit:
// requests_per_unit (beyond quota.MaxRate, quota.MaxRate) per unit times
// unit_multiplier.
func overrideLimit(o *extrlsv3.RateLimitDescriptor_RateLimitOverride) (quota.Limit, error) {
	u := o.GetUnit()
	if int(u) >= len(overrideUnits) || overrideUnits[u] == 0 {
		return quota.Limit{}, fmt.Errorf("unit %v: want SECOND, MINUTE, HOUR, DAY, MONTH or YEAR", u)
	}
	period := overrideUnits[u]
	if m := o.GetUnitMultiplier(); m != nil {
		if m.GetValue() == 0 || time.Duration(m.GetValue()) > quota.MaxPeriod/period {
			return quota.Limit{}, fmt.Errorf("unit_multiplier %d: want a period of 1 to %s", m.GetValue(), quota.MaxPeriod)
		}
		period *= time.Duration(m.GetValue())
	}
	return quota.Limit{Algorithm: quota.FixedWindow, Rate: min(int64(o.GetRequestsPerUnit()), quota.MaxRate), Period: period}, nil
}

func growTo[T any](s []T, n int) []T {
	if cap(s) < n {
		return make([]T, n)
	}
	return s[:n]
}

// observe reports every descriptor's decision, the binding one last: the
// descriptor whose decision is the call's.
func (s *Server) observe(ctx context.Context, cs *callScratch, call *floodgate.Decision, err error) {
	if s.cfg.obs == nil {
		return
	}
	binding := len(cs.out) - 1
	for i := range cs.out {
		if dd := &cs.out[i].Decision; dd.Policy != "" && dd.Policy == call.Policy && dd.Allowed == call.Allowed && dd.Shadow == call.Shadow {
			binding = i
		}
	}
	for i := range cs.out {
		if i == binding {
			continue
		}
		s.cfg.obs.Observe(ctx, &cs.out[i].Request, cs.out[i].Decision, nil)
	}
	s.cfg.obs.Observe(ctx, &cs.out[binding].Request, cs.out[binding].Decision, err)
}

// logf logs err at most once a second.
func (s *Server) logf(msg string, err error) {
	now := time.Now().UnixNano()
	last := s.lastLog.Load()
	if now-last < int64(time.Second) || !s.lastLog.CompareAndSwap(last, now) {
		return
	}
	s.cfg.logger.Warn(msg, "error", err)
}
