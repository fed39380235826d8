package floodgate

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"time"
)

// Priority is the importance of a request to the load shedder. Higher values
// are more important: Critical is never shed by the worker-utilisation
// shedder, Test is shed first. The zero value, PriorityUnspecified, means no
// source named a priority; stages then use their configured default.
type Priority uint8

// Priorities, least important first.
const (
	// PriorityUnspecified means nothing set the priority.
	PriorityUnspecified Priority = iota
	// PriorityTest is synthetic or test-mode traffic, shed first.
	PriorityTest
	// PriorityRead is traffic that only reads (GET, HEAD, read RPCs).
	PriorityRead
	// PriorityWrite is traffic that changes state (POST, PUT, write RPCs).
	PriorityWrite
	// PriorityCritical is traffic the service must keep serving (payments,
	// auth); the worker-utilisation shedder never sheds it.
	PriorityCritical
)

// NumPriorities is the number of Priority values including
// PriorityUnspecified; arrays indexed by Priority use it as their length.
const NumPriorities = int(PriorityCritical) + 1

var priorityNames = [NumPriorities]string{"unspecified", "test", "read", "write", "critical"}

// String returns the lower-case name of p: "critical", "write", "read",
// "test" or "unspecified".
func (p Priority) String() string {
	if int(p) < len(priorityNames) {
		return priorityNames[p]
	}
	return fmt.Sprintf("priority(%d)", uint8(p))
}

// Valid reports whether p is one of the named priorities (including
// PriorityUnspecified).
func (p Priority) Valid() bool { return int(p) < NumPriorities }

// ParsePriority parses a priority name as written by Priority.String. Case
// and surrounding spaces are ignored; "unspecified" and the empty string are
// rejected so that a typo never silently becomes a default.
func ParsePriority(s string) (Priority, error) {
	t := strings.ToLower(strings.TrimSpace(s))
	for i := 1; i < NumPriorities; i++ {
		if priorityNames[i] == t {
			return Priority(i), nil
		}
	}
	return PriorityUnspecified, fmt.Errorf("floodgate: unknown priority %q (want critical, write, read or test)", s)
}

// MarshalText implements encoding.TextMarshaler.
func (p Priority) MarshalText() ([]byte, error) {
	if !p.Valid() {
		return nil, fmt.Errorf("floodgate: invalid priority %d", uint8(p))
	}
	return []byte(p.String()), nil
}

// UnmarshalText implements encoding.TextUnmarshaler using ParsePriority.
func (p *Priority) UnmarshalText(b []byte) error {
	v, err := ParsePriority(string(b))
	if err != nil {
		return err
	}
	*p = v
	return nil
}

// Identity names who is calling. Each field is one scope a rate limit can key
// on. Transports fill it from sources the operator trusts (the peer address,
// trusted proxies, verified auth context); nothing a client merely asserts
// ends up here unless the operator declared that source trusted.
type Identity struct {
	// Tenant is the organisation or account the caller belongs to.
	Tenant string
	// User is the end user.
	User string
	// APIKey is the credential the call was made with. Stages never write
	// it raw to a store, a log or telemetry: keys are hashed first (the
	// tiers stage keeps a bounded in-memory cache from recent keys to their
	// hashes, so a repeat caller is not hashed again).
	APIKey string
	// IP is the client address, resolved through trusted proxies only.
	IP netip.Addr
}

// Request is the transport-neutral view of one call that every stage decides
// on. The first floodgate interceptor on a call builds it once and stores it
// in the context (NewContext); later interceptors reuse it.
type Request struct {
	// Method is the gRPC full method ("/pkg.Svc/Method") or the HTTP route
	// pattern ("GET /v1/items/{id}").
	Method string
	// Priority is the request's importance to the shedder.
	Priority Priority
	// Cost is the per-method cost from annotations; 0 means "not annotated"
	// and lets each rule's own cost (default 1) apply.
	Cost int64
	// Identity is who is calling.
	Identity Identity
	// Tier is the caller's plan tier ("free", "pro", "enterprise", ...),
	// used by rules whose rate is "tier".
	Tier string
}

type requestKey struct{}

type originKey struct{}

// NewRequestContext returns a context carrying a new, empty Request, and that
// Request, in a single allocation: the way transports start a call. origin
// identifies what built the Request (a transport's configuration; it may be
// nil) and is what Origin reports, so that a later layer can tell whether it
// would have built the same Request.
func NewRequestContext(parent context.Context, origin any) (context.Context, *Request) {
	c := &requestContext{Context: parent, origin: origin}
	return c, &c.r
}

// requestContext is a context node and the Request it carries, allocated
// together. Done, Err and Deadline are the parent's (embedded), so
// context.WithCancel below it still finds the parent's cancellation without a
// goroutine.
type requestContext struct {
	context.Context
	r      Request
	origin any
}

func (c *requestContext) Value(key any) any {
	switch key {
	case requestKey{}:
		return &c.r
	case originKey{}:
		return c.origin
	}
	return c.Context.Value(key)
}

// FromContext returns the Request stored in ctx by NewRequestContext, if
// any.
func FromContext(ctx context.Context) (*Request, bool) {
	r, ok := ctx.Value(requestKey{}).(*Request)
	return r, ok
}

// Origin returns the origin given to NewRequestContext for the Request in
// ctx, or nil.
func Origin(ctx context.Context) any { return ctx.Value(originKey{}) }

// MethodOptions are the floodgate settings of one method (a gRPC full
// method or an HTTP route pattern): what one call costs and how important
// it is. A zero field is unset and lets the next source decide it; package
// interceptor documents the order in which sources are consulted.
type MethodOptions struct {
	// Cost is the units one call charges at every rate-limit rule that
	// has no cost of its own; 0 is unset (1 in the end).
	Cost int64
	// Priority is the call's importance to the shedder;
	// PriorityUnspecified is unset.
	Priority Priority
}

// Stage names the kind of stage that made a decision.
type Stage string

// Stages, in chain order.
const (
	StageShedder     Stage = "shedder"
	StageConcurrency Stage = "concurrency"
	StageTiers       Stage = "tiers"
)

// Source names what produced a decision.
type Source string

// Sources.
const (
	// SourceStore: the rate-limit store (Redis or in-process) decided.
	SourceStore Source = "store"
	// SourceCache: the local over-limit cache answered "still denied"
	// without asking the store.
	SourceCache Source = "cache"
	// SourceLocalFallback: the store was unavailable and a local
	// golang.org/x/time/rate limiter decided.
	SourceLocalFallback Source = "local_fallback"
	// SourceFailOpen: the store was unavailable and the rule allows on error.
	SourceFailOpen Source = "fail_open"
	// SourceFailClosed: the store was unavailable and the rule denies on error.
	SourceFailClosed Source = "fail_closed"
	// SourceShedder: the load shedder decided.
	SourceShedder Source = "shedder"
	// SourceConcurrency: the in-flight limiter decided.
	SourceConcurrency Source = "concurrency"
	// SourceLease: units leased earlier from the store's bucket paid for
	// the request, decided locally (consistency leased).
	SourceLease Source = "lease"
	// SourceAsync: decided locally on the last known state of the store's
	// bucket, reported to the store later (consistency async).
	SourceAsync Source = "async"
	// SourcePolicy: the policy alone decided, without a store: the client
	// address is in one of its address lists (exempt or deny).
	SourcePolicy Source = "policy"
)

// Degraded reports whether s is a decision taken without the primary store.
func (s Source) Degraded() bool {
	return s == SourceLocalFallback || s == SourceFailOpen || s == SourceFailClosed
}

// Decision is what one stage decided about one request.
type Decision struct {
	// Allowed is true when the request may proceed past this stage.
	Allowed bool
	// Stage is the stage that decided.
	Stage Stage
	// Source is what produced the decision.
	Source Source
	// Policy is the name of the binding policy (rule name, "concurrency",
	// "shedder", ...). Empty when the stage has nothing to report.
	Policy string
	// Limit is the binding policy's quota (q in RateLimit-Policy), or the
	// capacity for concurrency and shedding. 0 when unknown.
	Limit int64
	// Window is the binding policy's window (w in RateLimit-Policy); 0 when
	// the policy has none (concurrency).
	Window time.Duration
	// Remaining is the quota left after this request.
	Remaining int64
	// Reset is the time until the binding policy's quota is fully restored.
	Reset time.Duration
	// RetryAfter is, on a deny, how long the caller should wait before the
	// request could be admitted. 0 on allow, and on a deny that waiting
	// cannot cure (a cost larger than the policy's capacity).
	RetryAfter time.Duration
	// HideQuota asks transports not to reveal Limit and Remaining to the
	// client (generic 429 body, no quota details).
	HideQuota bool
	// Shadow is true when a rule in shadow (dry-run) mode would have denied
	// this request; Allowed is then true.
	Shadow bool
	// Priority is the priority the stage used for the request.
	Priority Priority
	// Skipped names the rules that matched the request but did not apply
	// to it because it lacks an identity component their key needs (no
	// user, no tenant, no client address, ...), comma-separated, most
	// specific first; empty when every matching rule applied. A rule
	// skipped on every request is a configuration mistake (package
	// interceptor warns of one at start); one skipped by some requests
	// (anonymous callers of a per-user rule) is how keyed rules work.
	Skipped string
}

// Done is returned by a stage that admitted a request; the transport calls it
// exactly once when the request finishes (on return, panic, cancellation or
// the end of a stream). A stage that denies returns a nil Done. A Done
// returned by an Admitter may be nil when the stage holds nothing.
type Done func()

// Admitter is one stage of the chain.
//
// Admit decides on r. When the returned Decision allows, the returned Done
// (if non-nil) must be called once when the request finishes. When it
// denies, Done is nil. The Decision is always what to do; a non-nil error
// explains a degraded decision and is meant for logs and telemetry.
//
// Admitters must be safe for concurrent use and must not retain r after
// Done is called (or after a deny).
type Admitter interface {
	Admit(ctx context.Context, r *Request) (Decision, Done, error)
}

// AdmitFunc adapts a function to the Admitter interface.
type AdmitFunc func(ctx context.Context, r *Request) (Decision, Done, error)

// Admit calls f(ctx, r).
func (f AdmitFunc) Admit(ctx context.Context, r *Request) (Decision, Done, error) {
	return f(ctx, r)
}

// Chain is an Admitter that runs its stages in order. It stops at the first
// stage that denies, calls the Done of the stages already passed, and returns
// the denying stage's Decision. When every stage allows, it returns the
// Decision of the last stage that named a Policy (the rate-limit stage, when
// present, so transports can send its quota headers), and a Done that calls
// every stage's Done in reverse order.
//
// Errors from stages are joined; a stage's error never by itself stops the
// chain, its Decision does.
type Chain []Admitter

// Admit implements Admitter.
func (c Chain) Admit(ctx context.Context, r *Request) (Decision, Done, error) {
	switch len(c) {
	case 0:
		return Decision{Allowed: true}, nil, nil
	case 1:
		return c[0].Admit(ctx, r)
	}
	var (
		buf    [4]Done
		dones  = buf[:0] // stays on the stack for chains of up to 4 stages
		errs   []error
		result Decision
		picked bool
	)
	for _, a := range c {
		d, done, err := a.Admit(ctx, r)
		if err != nil {
			errs = append(errs, err)
		}
		if !d.Allowed {
			releaseReverse(dones)
			return d, nil, joinErrors(errs)
		}
		if done != nil {
			dones = append(dones, done)
		}
		if d.Policy != "" || !picked {
			result, picked = d, true
		}
	}
	switch n := len(dones); {
	case n == 0:
		return result, nil, joinErrors(errs)
	case n == 1:
		return result, dones[0], joinErrors(errs)
	case n <= len(buf):
		// Four values captured by value: the closure is the only allocation.
		d0, d1, d2, d3 := buf[0], buf[1], buf[2], buf[3]
		return result, func() {
			if d3 != nil {
				d3()
			}
			if d2 != nil {
				d2()
			}
			d1()
			d0()
		}, joinErrors(errs)
	}
	heap := append([]Done(nil), dones...)
	return result, func() { releaseReverse(heap) }, joinErrors(errs)
}

func releaseReverse(dones []Done) {
	for i := len(dones) - 1; i >= 0; i-- {
		dones[i]()
	}
}

// Observer is told of every decision a stage makes. Implementations must be
// safe for concurrent use and fast: they run on the request path. err is the
// error the stage returned with the decision, if any.
type Observer interface {
	Observe(ctx context.Context, r *Request, d Decision, err error)
}

// ObserverFunc adapts a function to the Observer interface.
type ObserverFunc func(ctx context.Context, r *Request, d Decision, err error)

// Observe calls f.
func (f ObserverFunc) Observe(ctx context.Context, r *Request, d Decision, err error) {
	f(ctx, r, d, err)
}

// Observed returns an Admitter that reports every decision of a to o, once.
// If a is a Chain, each of its stages is wrapped, so every stage's decision
// is reported, not only the chain's result.
func Observed(a Admitter, o Observer) Admitter {
	if o == nil {
		return a
	}
	if c, ok := a.(Chain); ok {
		out := make(Chain, len(c))
		for i, s := range c {
			out[i] = Observed(s, o)
		}
		return out
	}
	return observed{a: a, o: o}
}

type observed struct {
	a Admitter
	o Observer
}

// Unwrap returns the Admitter w reports on, so that code looking for a
// stage's capabilities (the interceptors reading a policy's methods:
// section) sees through the wrapper.
func (w observed) Unwrap() Admitter { return w.a }

func (w observed) Admit(ctx context.Context, r *Request) (Decision, Done, error) {
	d, done, err := w.a.Admit(ctx, r)
	w.o.Observe(ctx, r, d, err)
	return d, done, err
}

// Clock is the source of time for every stage, injected so tests run on fake
// time (see package testing/clock).
type Clock interface {
	Now() time.Time
}

// SystemClock returns the Clock backed by time.Now, the default of every
// stage.
func SystemClock() Clock { return systemClock{} }

type systemClock struct{}

func (systemClock) Now() time.Time { return time.Now() }

func joinErrors(errs []error) error {
	switch len(errs) {
	case 0:
		return nil
	case 1:
		return errs[0]
	}
	return errors.Join(errs...)
}
