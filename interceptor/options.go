package interceptor

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/netip"
	"strings"
	"time"

	"github.com/floodgate-go/floodgate"
)

// Option configures an Interceptor (New). Some options describe how the floodgate.Request is
// built (identity, trusted proxies, methods, routes); the others how a
// decision is observed and answered. Every interceptor made from one
// Interceptor shares them, so a chain of stages built from one New sees one
// Request.
type Option func(*config)

// ClientIPHeader names the header (or gRPC metadata key) a trusted proxy
// uses to forward the client's address.
type ClientIPHeader int

// Forwarding headers.
const (
	// XForwardedFor: X-Forwarded-For, a comma-separated list of hops, the
	// rightmost added by the nearest proxy. The default.
	XForwardedFor ClientIPHeader = iota
	// Forwarded: the RFC 7239 Forwarded header, its for= parameters.
	Forwarded
	// XRealIP: X-Real-IP, one address set by the proxy.
	XRealIP
)

// What the server and the client put on the wire, and their defaults.
const (
	// DefaultDomain is the google.rpc.ErrorInfo domain unless WithDomain
	// names another.
	DefaultDomain = "floodgate-go.github.io"
	// PushbackTrailer is the gRPC trailer (gRFC A6) carrying how many
	// milliseconds a client should wait before retrying; grpc-go's
	// built-in retry policy reads it.
	PushbackTrailer = "grpc-retry-pushback-ms"
	// ReasonClientThrottled is the google.rpc.ErrorInfo reason of a call
	// the client throttled itself, without sending it (WithThrottle).
	ReasonClientThrottled = "CLIENT_THROTTLED"
	// DefaultThrottleK is Throttle.K unless set: the client keeps sending
	// while its requests stay under twice what the server accepts.
	DefaultThrottleK = 2
	// DefaultThrottleWindow is Throttle.Window unless set.
	DefaultThrottleWindow = 30 * time.Second
)

type config struct {
	errs []error

	observers []floodgate.Observer
	domain    string
	clock     floodgate.Clock

	skip        func(method string) bool
	healthPaths map[string]bool

	trusted    []netip.Prefix
	ipHeader   ClientIPHeader
	clientAddr func(context.Context) (netip.Addr, bool) // withClientAddr

	user, tenant, apiKey, tier Extractor
	priorityHeader             string

	methods     map[string]floodgate.MethodOptions
	annotations bool
	cost        func(ctx context.Context, method string, md Metadata) int64 // WithCost

	// builds is set by every option that changes how the Request is
	// built; see Interceptor.request.
	builds bool

	perMessage bool

	deny *DenyResponse // WithDenyResponse; nil: the standard answers

	// strictIdentity: a rule whose key scope no extractor fills is an
	// error, not a warning (WithStrictIdentity).
	strictIdentity bool

	// HTTP only.
	route         func(*http.Request) string
	mux           *http.ServeMux
	legacyHeaders bool
}

func newConfig(opts []Option) (*config, error) {
	c := &config{domain: DefaultDomain, clock: floodgate.SystemClock(), annotations: true}
	for _, o := range opts {
		if o == nil {
			c.errs = append(c.errs, errors.New("interceptor: nil Option"))
			continue
		}
		o(c)
	}
	if len(c.errs) > 0 {
		return nil, errors.Join(c.errs...)
	}
	return c, nil
}

func (c *config) fail(format string, args ...any) {
	c.errs = append(c.errs, fmt.Errorf("interceptor: "+format, args...))
}

// WithObserver reports every stage's decision to each observer, once per
// decision, in order: each stage of a floodgate.Chain is reported, not
// only the chain's result. It is how decisions are observed (package
// otel's Observer, grpcmw.WithLogFields); the interceptor wraps each stage
// in a wrapper that follows floodgate's unwrap convention, so what the
// stage offers (a policy's methods:, the headers it reads) is still found.
func WithObserver(obs ...floodgate.Observer) Option {
	return func(c *config) {
		for _, o := range obs {
			if o == nil {
				c.fail("WithObserver: nil Observer")
				continue
			}
			c.observers = append(c.observers, o)
		}
	}
}

// fanOut tells every observer of one decision, in order.
type fanOut []floodgate.Observer

func (os fanOut) Observe(ctx context.Context, r *floodgate.Request, d floodgate.Decision, err error) {
	for _, o := range os {
		o.Observe(ctx, r, d, err)
	}
}

// observe returns an Admitter that reports every decision of a to o, once.
// If a is a floodgate.Chain, each of its stages is wrapped, so every
// stage's decision is reported, not only the chain's result.
func observe(a floodgate.Admitter, o floodgate.Observer) floodgate.Admitter {
	if c, ok := a.(floodgate.Chain); ok {
		out := make(floodgate.Chain, len(c))
		for i, s := range c {
			out[i] = observe(s, o)
		}
		return out
	}
	return observed{a: a, o: o}
}

// observed is the wrapper of observe.
type observed struct {
	a floodgate.Admitter
	o floodgate.Observer
}

// Unwrap returns the Admitter w reports on (floodgate's unwrap
// convention).
func (w observed) Unwrap() floodgate.Admitter { return w.a }

func (w observed) Admit(ctx context.Context, r *floodgate.Request) (floodgate.Decision, floodgate.Done, error) {
	d, done, err := w.a.Admit(ctx, r)
	w.o.Observe(ctx, r, d, err)
	return d, done, err
}

// WithDomain sets the google.rpc.ErrorInfo domain of gRPC denials, the
// logical name of the service (AIP-193), for example "search.example.com".
// The default is DefaultDomain.
func WithDomain(domain string) Option {
	return func(c *config) {
		if strings.TrimSpace(domain) == "" {
			c.fail("WithDomain: empty domain")
			return
		}
		c.domain = domain
	}
}

// WithClock sets the clock used for the epoch-seconds X-RateLimit-Reset
// field (see WithLegacyHeaders). The default is floodgate.SystemClock().
func WithClock(clk floodgate.Clock) Option {
	return func(c *config) {
		if clk == nil {
			c.fail("WithClock: nil Clock")
			return
		}
		c.clock = clk
	}
}

// WithSkip exempts methods from limiting: calls for which skip returns true
// pass untouched (no decision, no headers). method is the gRPC full method
// or the HTTP route (see HTTP). Health checks and ORCA load report
// streams are always exempt.
func WithSkip(skip func(method string) bool) Option {
	return func(c *config) {
		if skip == nil {
			c.fail("WithSkip: nil func")
			return
		}
		c.skip = skip
	}
}

// WithHealthPaths names HTTP paths (exact r.URL.Path matches, such as
// "/healthz") that are never limited. gRPC health checks
// (/grpc.health.v1.Health/*) are always exempt.
func WithHealthPaths(paths ...string) Option {
	return func(c *config) {
		if c.healthPaths == nil {
			c.healthPaths = make(map[string]bool, len(paths))
		}
		for _, p := range paths {
			if !strings.HasPrefix(p, "/") {
				c.fail("WithHealthPaths: path %q does not start with /", p)
				continue
			}
			c.healthPaths[p] = true
		}
	}
}

// WithTrustedProxies lists the proxies (CIDRs such as "10.0.0.0/8", or
// single addresses) whose forwarding header is believed. A request whose
// immediate peer is not in the list is identified by the peer address
// whatever headers it sends. Invalid CIDRs are a configuration error.
func WithTrustedProxies(cidrs ...string) Option {
	return func(c *config) {
		c.builds = true
		for _, s := range cidrs {
			s = strings.TrimSpace(s)
			var p netip.Prefix
			var err error
			if strings.Contains(s, "/") {
				p, err = netip.ParsePrefix(s)
			} else {
				var a netip.Addr
				a, err = netip.ParseAddr(s)
				if err == nil {
					p = netip.PrefixFrom(a, a.BitLen())
				}
			}
			if err != nil {
				c.fail("WithTrustedProxies: %q is not a CIDR or address: %v", s, err)
				continue
			}
			p = p.Masked()
			if p.Addr().Is4In6() {
				p = netip.PrefixFrom(p.Addr().Unmap(), p.Bits()-96)
				if p.Bits() < 0 {
					c.fail("WithTrustedProxies: %q: IPv4-mapped prefix shorter than /96", s)
					continue
				}
			}
			c.trusted = append(c.trusted, p)
		}
	}
}

// WithClientIPHeader chooses the one forwarding header the trusted proxies
// set (default XForwardedFor). Only that header is read, so a client cannot
// slip a different one past a proxy that does not overwrite it.
func WithClientIPHeader(h ClientIPHeader) Option {
	return func(c *config) {
		c.builds = true
		if h < XForwardedFor || h > XRealIP {
			c.fail("WithClientIPHeader: unknown header %d", int(h))
			return
		}
		c.ipHeader = h
	}
}

func extractorOption(name string, dst func(*config) *Extractor, e Extractor) Option {
	return func(c *config) {
		c.builds = true
		if e == nil {
			c.fail("%s: nil Extractor", name)
			return
		}
		*dst(c) = e
	}
}

// WithUser sets how Identity.User is found.
func WithUser(e Extractor) Option {
	return extractorOption("WithUser", func(c *config) *Extractor { return &c.user }, e)
}

// WithTenant sets how Identity.Tenant is found.
func WithTenant(e Extractor) Option {
	return extractorOption("WithTenant", func(c *config) *Extractor { return &c.tenant }, e)
}

// WithAPIKey sets how Identity.APIKey is found. The key is handed to the
// stages only; this package never logs it or puts it in an error.
func WithAPIKey(e Extractor) Option {
	return extractorOption("WithAPIKey", func(c *config) *Extractor { return &c.apiKey }, e)
}

// WithTier sets how Request.Tier (the caller's plan) is found.
func WithTier(e Extractor) Option {
	return extractorOption("WithTier", func(c *config) *Extractor { return &c.tier }, e)
}

// WithPriorityHeader names a header / metadata key set by a trusted
// upstream (for example an API gateway) carrying the request's priority
// ("critical", "write", "read", "test"). It overrides every static source.
// Only name a key your edge strips from client requests. An unparsable
// value is ignored (logged, rate-limited).
func WithPriorityHeader(key string) Option {
	return func(c *config) {
		c.builds = true
		if strings.TrimSpace(key) == "" {
			c.fail("WithPriorityHeader: empty key")
			return
		}
		c.priorityHeader = strings.ToLower(key)
	}
}

// WithMethods sets cost and priority per method from Go: keys are gRPC full
// methods ("/pkg.Svc/Method") or HTTP route patterns ("GET /v1/items/{id}").
// The map is copied. Negative costs and unknown priorities are
// configuration errors. See the package doc for where the map stands among
// the other sources of cost and priority.
func WithMethods(m map[string]floodgate.MethodOptions) Option {
	return func(c *config) {
		c.builds = true
		if c.methods == nil {
			c.methods = make(map[string]floodgate.MethodOptions, len(m))
		}
		for k, v := range m {
			if v.Cost < 0 {
				c.fail("WithMethods: method %q: cost %d is negative", k, v.Cost)
				continue
			}
			if !v.Priority.Valid() {
				c.fail("WithMethods: method %q: priority %d is not a known priority", k, uint8(v.Priority))
				continue
			}
			c.methods[k] = v
		}
	}
}

// WithoutAnnotations stops the interceptor reading (floodgate.v1.method)
// options from the registered proto descriptors.
func WithoutAnnotations() Option {
	return func(c *config) {
		c.builds, c.annotations = true, false
	}
}

// WithPerMessage charges every message a client sends on a stream, in
// addition to the charge when the stream opens. A denied message ends the
// stream's RecvMsg with the denial status. Each message's admission is
// released as soon as the message is received, so a concurrency stage
// bounds message handling only while RecvMsg runs.
func WithPerMessage() Option {
	return func(c *config) { c.perMessage = true }
}

// WithRoute sets how the HTTP middleware names a request when r.Pattern is
// empty (the middleware wraps the mux instead of the handlers in it); a
// request route names "" is named as without it. The function must return
// a bounded set of names (route templates): every name may become a
// rate-limit key. Raw paths are unbounded (IDs in paths), so name a
// request by its path only when paths are few:
//
//	interceptor.WithRoute(func(r *http.Request) string { return r.Method + " " + r.URL.Path })
func WithRoute(route func(r *http.Request) string) Option {
	return func(c *config) {
		c.builds = true
		if route == nil {
			c.fail("WithRoute: nil func")
			return
		}
		c.route = route
	}
}

// WithServeMux names each HTTP request by the pattern mux routes it to
// (mux.Handler(r), at the cost of routing twice), before r.Pattern: so
// middleware that wraps mux, or that wraps it under an outer router
// (top.Handle("/", mw(mux)), whose r.Pattern is "/"), matches the rules
// written for mux's routes.
func WithServeMux(mux *http.ServeMux) Option {
	return func(c *config) {
		c.builds = true
		if mux == nil {
			c.fail("WithServeMux: nil mux")
			return
		}
		c.mux = mux
	}
}

// WithLegacyHeaders adds X-RateLimit-Limit, X-RateLimit-Remaining and
// X-RateLimit-Reset (Unix epoch seconds, as GitHub sends it) to HTTP
// responses next to the IETF RateLimit fields.
func WithLegacyHeaders() Option {
	return func(c *config) { c.legacyHeaders = true }
}

// Extractor finds one identity value (user, tenant, API key, tier) for a
// call. md reads the call's HTTP headers or incoming gRPC metadata, and
// holds the decoded request message of a unary gRPC call (Message) or the
// HTTP request (HTTPRequest). Return "" when the value is unknown. See
// FromClaims, FromProtoField, FromMessage, FromHTTPRequest, FromHeader and
// FirstOf for where a value can be trusted.
type Extractor func(ctx context.Context, md Metadata) string

// Metadata reads the headers of an HTTP request or the incoming metadata of
// a gRPC call, and carries the call's request message or HTTP request for
// the extractors that read them.
type Metadata struct {
	h   http.Header
	ctx context.Context
	msg any           // unary gRPC: the decoded request message
	req *http.Request // HTTP: the request
}

// Get returns the first value of key (case-insensitive), or "".
func (m Metadata) Get(key string) string {
	if m.h != nil {
		return m.h.Get(key)
	}
	if m.ctx != nil {
		return firstMD(m.ctx, key)
	}
	return ""
}

// Values returns every value of key (case-insensitive), in order.
func (m Metadata) Values(key string) []string {
	if m.h != nil {
		return m.h.Values(key)
	}
	if m.ctx != nil {
		return valuesMD(m.ctx, key)
	}
	return nil
}

// FromHeader returns an Extractor reading the first value of a header or
// gRPC metadata key. Use it only for keys your edge proxy or auth layer sets
// and strips from client requests: clients can send any header. An empty
// key yields a nil Extractor, which the With... options report as an
// error.
func FromHeader(key string) Extractor {
	key = strings.ToLower(strings.TrimSpace(key))
	if key == "" {
		return nil
	}
	return func(_ context.Context, md Metadata) string { return md.Get(key) }
}

// FromClaims returns an Extractor reading the named claim of an
// already-verified token. claims returns the verified claims stored in the
// context by your auth middleware (ok false when there are none). String
// claims are used as is, numbers in their decimal form; other types yield
// "". A nil claims func or an empty claim name yields a nil Extractor,
// which the With... options report as an error.
func FromClaims(claims func(ctx context.Context) (map[string]any, bool), claim string) Extractor {
	if claims == nil || claim == "" {
		return nil
	}
	return func(ctx context.Context, _ Metadata) string {
		m, ok := claims(ctx)
		if !ok {
			return ""
		}
		return claimString(m[claim])
	}
}
