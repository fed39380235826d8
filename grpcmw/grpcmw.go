package grpcmw

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors"
	"github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors/logging"
	"github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors/ratelimit"
	"github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors/realip"
	"github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors/selector"
	"google.golang.org/grpc"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/concurrency"
	"github.com/floodgate-go/floodgate/concurrency/fleetconc"
	"github.com/floodgate-go/floodgate/interceptor"
	"github.com/floodgate-go/floodgate/internal/seam"
	"github.com/floodgate-go/floodgate/shedder"
	"github.com/floodgate-go/floodgate/shedder/fleetshed"
)

// WithRealIP is the interceptor option that makes floodgate limit the
// client address go-grpc-middleware's realip interceptor resolved
// (realip.FromContext); run realip before floodgate's interceptors. Calls
// for which realip resolved nothing fall back to floodgate's own
// resolution: the peer, and the forwarding header only through
// interceptor.WithTrustedProxies.
func WithRealIP() interceptor.Option {
	// Package interceptor supplies the option; were it not to, the nil
	// Option is an error of interceptor.New.
	o, _ := seam.WithClientAddr[interceptor.Option](realip.FromContext)
	return o
}

// WithLogFields is the interceptor option that adds every decision to the
// fields go-grpc-middleware's logging interceptor writes for the call; see
// the package doc for the fields and where logging must run.
func WithLogFields() interceptor.Option {
	return interceptor.WithObserver(logFields{})
}

// logFields is the Observer behind WithLogFields.
type logFields struct{}

func (logFields) Observe(ctx context.Context, r *floodgate.Request, d floodgate.Decision, _ error) {
	if seam.InStreamMessage(ctx) {
		return
	}
	logging.AddFields(ctx, decisionFields(r, d))
}

// Log field keys, the names of package otel's span attributes.
const (
	FieldDecision   = "floodgate.decision"
	FieldStage      = "floodgate.stage"
	FieldPolicy     = "floodgate.policy"
	FieldSource     = "floodgate.source"
	FieldPriority   = "floodgate.priority"
	FieldLimit      = "floodgate.limit"
	FieldRemaining  = "floodgate.remaining"
	FieldRetryAfter = "floodgate.retry_after"
	FieldShadow     = "floodgate.shadow"
	FieldDegraded   = "floodgate.degraded"
)

// decisionFields are the log fields of one decision: always the same keys,
// so a later decision of the call replaces every field of an earlier one.
func decisionFields(r *floodgate.Request, d floodgate.Decision) logging.Fields {
	prio := d.Priority
	if prio == floodgate.PriorityUnspecified && r != nil {
		prio = r.Priority
	}
	return logging.Fields{
		FieldDecision, d.Label(),
		FieldStage, string(d.Stage),
		FieldPolicy, d.Policy,
		FieldSource, string(d.Source),
		FieldPriority, prio.String(),
		FieldLimit, d.Limit,
		FieldRemaining, d.Remaining,
		FieldRetryAfter, d.RetryAfter.Seconds(),
		FieldShadow, d.Shadow,
		FieldDegraded, d.Source.Degraded(),
	}
}

// Exempt returns a selector.Matcher that matches every call except those
// to the listed methods, for selector.UnaryServerInterceptor and
// selector.StreamServerInterceptor around floodgate's interceptors: the
// listed methods are never limited. A method is a gRPC full method
// ("/pkg.Service/Method") or a whole service ("/pkg.Service/*"). With no
// methods, every call is matched (a list read from configuration may be
// empty). The error names every malformed method.
func Exempt(methods ...string) (selector.Matcher, error) {
	m := exempt{methods: make(map[[2]string]bool, len(methods)), services: map[string]bool{}}
	var errs []error
	for _, s := range methods {
		svc, method, ok := splitMethod(s)
		switch {
		case !ok:
			errs = append(errs, fmt.Errorf("grpcmw: Exempt: %q is not /pkg.Service/Method or /pkg.Service/*", s))
		case method == "*":
			m.services[svc] = true
		default:
			m.methods[[2]string{svc, method}] = true
		}
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return m, nil
}

// MustExempt is Exempt for use inline in a server's options: it panics
// with Exempt's error.
func MustExempt(methods ...string) selector.Matcher {
	m, err := Exempt(methods...)
	if err != nil {
		panic(err)
	}
	return m
}

// splitMethod splits "/svc/method" into its non-empty parts.
func splitMethod(s string) (svc, method string, ok bool) {
	if !strings.HasPrefix(s, "/") {
		return "", "", false
	}
	svc, method, ok = strings.Cut(s[1:], "/")
	if !ok || svc == "" || method == "" || strings.ContainsAny(method, "/") ||
		(strings.Contains(method, "*") && method != "*") || strings.Contains(svc, "*") {
		return "", "", false
	}
	return svc, method, true
}

type exempt struct {
	methods  map[[2]string]bool // {service, method}
	services map[string]bool
}

// Match reports whether floodgate should see the call: false for an exempt
// method.
func (e exempt) Match(_ context.Context, c interceptors.CallMeta) bool {
	return !e.services[c.Service] && !e.methods[[2]string{c.Service, c.Method}]
}

// Limiter is floodgate's rate limits as a go-grpc-middleware
// ratelimit.Limiter, for ratelimit.UnaryServerInterceptor and
// ratelimit.StreamServerInterceptor. See the package doc for what a
// denied client loses compared with floodgate's own interceptors.
type Limiter struct {
	unary grpc.UnaryServerInterceptor
}

var _ ratelimit.Limiter = (*Limiter)(nil)

// NewLimiter returns a Limiter deciding each call through a, with the
// interceptor fg makes (fg.UnaryServer(a)): the Request built as fg
// builds it (identity, trusted proxies, WithRealIP, methods). Make it from
// the Interceptor that makes the chain's other floodgate interceptors (the
// shedder's), so every stage of a call decides on one Request and they all
// know a's policy (its methods:, the headers it reads). a is a rate-limit
// stage (a *tiers.Limiter) or a floodgate.Chain of them. The shedder and
// the concurrency limiters are refused, also behind wrappers that follow
// floodgate's unwrap convention: they hold a slot for as long as a call
// runs, and ratelimit.Limiter has no hook for the end of a call, so they
// would release at once and limit nothing; give them floodgate's
// interceptors. ratelimit.Limiter is handed the context only, so
// extractors that read the request message see none. The error names every
// problem, including what fg.UnaryServer would panic with.
func NewLimiter(fg *interceptor.Interceptor, a floodgate.Admitter) (l *Limiter, err error) {
	var errs []error
	if fg == nil {
		errs = append(errs, errors.New("grpcmw: NewLimiter: nil Interceptor"))
	}
	if a == nil {
		errs = append(errs, errors.New("grpcmw: NewLimiter: nil Admitter"))
	} else {
		errs = append(errs, holding(a)...)
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	defer func() {
		// UnaryServer panics on a configuration mistake it finds while
		// wrapping a (interceptor.WithStrictIdentity); return it instead.
		if r := recover(); r != nil {
			l, err = nil, fmt.Errorf("grpcmw: NewLimiter: %v", r)
		}
	}()
	return &Limiter{unary: fg.UnaryServer(a)}, nil
}

// holding names the stages of a that hold a slot for a call's duration,
// looking through wrappers.
func holding(a floodgate.Admitter) []error {
	if ch, ok := a.(floodgate.Chain); ok {
		var errs []error
		for _, s := range ch {
			if s == nil {
				errs = append(errs, errors.New("grpcmw: NewLimiter: nil stage in Chain"))
				continue
			}
			errs = append(errs, holding(s)...)
		}
		return errs
	}
	for _, err := range []error{holds[*shedder.Shedder](a), holds[*fleetshed.Shedder](a), holds[*concurrency.Limiter](a), holds[*fleetconc.Limiter](a), holds[*concurrency.Adaptive](a)} {
		if err != nil {
			return []error{err}
		}
	}
	return nil
}

// holds names a T in a (floodgate.As), a stage that holds a slot.
func holds[T floodgate.Admitter](a floodgate.Admitter) error {
	if t, ok := floodgate.As[T](a); ok {
		return fmt.Errorf("grpcmw: NewLimiter: %T holds a slot for the whole call, which ratelimit.Limiter cannot report the end of; use floodgate's own interceptor (interceptor.New) for it", t)
	}
	return nil
}

// Limit decides the call whose server context ctx is: nil when admitted,
// else the status error floodgate's interceptor would return (which the
// ratelimit interceptor flattens into its message). It also sets the
// grpc-retry-pushback-ms trailer of a denied call. Limit is for the
// ratelimit server interceptors: a ctx that is not a gRPC server call's
// (ratelimit's client interceptors) has no method to decide on, and Limit
// returns an error naming the misuse.
func (l *Limiter) Limit(ctx context.Context) error {
	method, ok := grpc.Method(ctx)
	if !ok {
		return errors.New("grpcmw: Limiter.Limit: ctx is not a gRPC server call's context; use the Limiter with ratelimit's server interceptors")
	}
	// floodgate's interceptor admits the call, sets the trailer on a deny,
	// and releases the stages as soon as the no-op handler returns.
	_, err := l.unary(ctx, nil, &grpc.UnaryServerInfo{FullMethod: method}, admitted)
	return err
}

func admitted(context.Context, any) (any, error) { return nil, nil }
