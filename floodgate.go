package floodgate

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net/netip"
	"strings"
	"time"
	"unsafe"

	"github.com/floodgate-go/floodgate/internal/reqctx"
	"github.com/floodgate-go/floodgate/internal/syntax"
)

// Priority is the importance of a request to the load shedder. Higher values
// are more important: Critical is never shed by the worker-utilisation
// shedder, Test is shed first. The zero value, PriorityUnspecified, means no
// source named a priority; stages then use their configured default.
type Priority uint8

// Priorities, least important first, and how many there are.
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

	// NumPriorities is the number of Priority values including
	// PriorityUnspecified; arrays indexed by Priority use it as their
	// length.
	NumPriorities = int(PriorityCritical) + 1
)

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
// in the context (FromContext finds it), in one allocation with the
// context; later interceptors reuse it.
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
	// Headers are the header (HTTP) or metadata (gRPC) values of the call
	// that a stage asked the transport for, and only those: a rate-limit
	// policy that matches or keys on a header names it (package tiers),
	// and package interceptor copies the first value of each such name
	// present on the call. nil when no stage asks for any. A header is
	// whatever the client sent unless an edge proxy sets it and strips
	// the client's: it is no identity.
	Headers []Header
	// SoftExceeded is set by the transport once the stages have admitted
	// the call: the soft rate limits it went over (Decision.SoftExceeded),
	// comma-separated, or empty. The handler reads it here (FromContext)
	// to bill the overage or downgrade the work; stages do not read it.
	SoftExceeded string
}

// Header is one header or metadata value of a Request (Request.Headers).
type Header struct {
	// Name is the lower-case header or metadata key.
	Name string
	// Value is its first value on the call; never empty.
	Value string
}

// Header returns the value of the header (or metadata key) name, as the
// transport copied it into r.Headers, or "" when the call has none. name
// must be lower-case.
func (r *Request) Header(name string) string {
	for i := range r.Headers {
		if r.Headers[i].Name == name {
			return r.Headers[i].Value
		}
	}
	return ""
}

// FromContext returns the Request a floodgate interceptor stored in ctx
// (the first floodgate interceptor of a call builds it; the handler and
// every later stage find it here), if any.
func FromContext(ctx context.Context) (*Request, bool) {
	return reqctx.Request[Request](ctx)
}

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
	// quotas and nQuotas hold Quotas (a pointer and a length, not a
	// slice, so that Decision stays comparable with ==).
	nQuotas int32
	quotas  *Quota
	// Waited is how long the stage held an admitted request before
	// letting it proceed: a rate-limit rule with max_wait books the
	// request's units ahead and the request waits until they are there
	// (server-side shaping). 0 when it did not wait. On a deny it is how
	// long the request waited before its wait was cut short (its
	// context ended).
	Waited time.Duration
	// Skipped names the rules that matched the request but did not apply
	// to it because it lacks an identity component their key needs (no
	// user, no tenant, no client address, ...), comma-separated, most
	// specific first; empty when every matching rule applied. A rule
	// skipped on every request is a configuration mistake (package
	// interceptor warns of one at start); one skipped by some requests
	// (anonymous callers of a per-user rule) is how keyed rules work.
	Skipped string
	// SoftExceeded names the soft rate limits (package tiers: rules with
	// soft: true; "rule/period" for one window of several) that this
	// admitted request went over, comma-separated, in the order of its
	// rules; empty when it went over none. A soft limit admits a request
	// over it, charging it nothing there, and marks it: quota mode, for a
	// caller that bills the overage or downgrades the request. Package
	// interceptor sends it to the client and copies it into
	// Request.SoftExceeded for the handler; package otel records it. A
	// denied request is never marked.
	SoftExceeded string
}

// Quota is one rate-limit window of a Decision (Decision.Quotas): a
// policy of the RateLimit-Policy field, and when Violated a violation of
// google.rpc.QuotaFailure.
type Quota struct {
	// Policy names the window (package tiers: the rule's name, or
	// "rule/period" for a rule with several windows).
	Policy string
	// Limit is the window's quota (q).
	Limit int64
	// Window is the window's length (w).
	Window time.Duration
	// Remaining is the quota left in the window after this request (before
	// it, on a deny).
	Remaining int64
	// Reset is the time until the window's quota is fully restored.
	Reset time.Duration
	// RetryAfter is, for a violated window, the wait until it would admit
	// the request; 0 otherwise, and when waiting cannot help.
	RetryAfter time.Duration
	// Violated is true when this window denied the request.
	Violated bool
}

// Quotas returns every rate-limit window the decision reports, when there
// is more than one: the binding window first (the one Policy, Limit,
// Window, Remaining, Reset and RetryAfter describe), then the binding
// rule's other windows, then, on a deny, every other window that denied
// (Violated) and does not hide its quota. It is nil when the binding
// window is the only one (the common case, which allocates nothing), and
// when HideQuota is set. Transports list them in RateLimit-Policy and
// RateLimit, and the violated ones in google.rpc.QuotaFailure. The slice
// is shared by every copy of d and must not be modified. Two decisions
// with equal quotas compare equal with == only when they share them:
// compare Quotas with slices.Equal.
func (d Decision) Quotas() []Quota {
	if d.quotas == nil {
		return nil
	}
	return unsafe.Slice(d.quotas, d.nQuotas)
}

// SetQuotas makes qs what d.Quotas returns (nil or empty: none); a stage
// calls it. d keeps qs, not a copy: qs must not be modified afterwards.
func (d *Decision) SetQuotas(qs []Quota) {
	if len(qs) == 0 || len(qs) > math.MaxInt32 {
		d.quotas, d.nQuotas = nil, 0
		return
	}
	d.quotas, d.nQuotas = &qs[0], int32(len(qs))
}

// Done is returned by a stage that admitted a request; the transport calls it
// exactly once when the request finishes (on return, panic, cancellation or
// the end of a stream), with what it knows of how the request went. A stage
// that denies returns a nil Done. A Done returned by an Admitter may be nil
// when the stage holds nothing.
type Done func(Result)

// Outcome is how an admitted request ended, as the transport saw it. Stages
// that learn from requests (adaptive limits, latency-driven shedding) read
// it to tell a valid latency sample from one that says nothing of the
// service's load.
type Outcome uint8

// Outcomes. The zero value is OutcomeSuccess, so Result{} reports a request
// that completed normally.
const (
	// OutcomeSuccess: the handler ran and returned without error. Its
	// latency is a sample of the service's health.
	OutcomeSuccess Outcome = iota
	// OutcomeFailed: the handler ran and returned an error that says
	// nothing of load (invalid argument, not found, an internal error).
	// Whether its latency is a sample is the stage's choice, documented
	// by the stage.
	OutcomeFailed
	// OutcomeDropped: the request ended in a way that signals overload:
	// its deadline passed, or the handler returned a resource-exhausted,
	// unavailable or timeout error (gRPC DeadlineExceeded,
	// ResourceExhausted, Unavailable; HTTP 429, 503, 504). Adaptive limits
	// shrink on it.
	OutcomeDropped
	// OutcomeIgnored: the request never ran its handler to completion for
	// a reason that says nothing of the service: a later stage of a Chain
	// denied it, the client cancelled it, or the handler panicked. No
	// latency sample is taken.
	OutcomeIgnored
)

var outcomeNames = [...]string{"success", "failed", "dropped", "ignored"}

// String returns the lower-case name of o: "success", "failed", "dropped"
// or "ignored".
func (o Outcome) String() string {
	if int(o) < len(outcomeNames) {
		return outcomeNames[o]
	}
	return fmt.Sprintf("outcome(%d)", uint8(o))
}

// Result is what a finished request reports to the Done of every stage that
// admitted it: how it ended and, when the handler reported it, what it
// actually cost. It is one value for both needs: adaptive stages read
// Outcome, rate-limit stages settle a charge made on an estimate with Cost.
type Result struct {
	// Outcome is how the request ended.
	Outcome Outcome
	// Cost is the request's actual cost (tokens, rows, bytes: whatever
	// unit the rules count) when HasCost is true. A rate-limit stage that
	// charged an estimate charges the difference, or refunds it, on every
	// level it charged. Never negative.
	Cost int64
	// HasCost reports whether Cost is set. When false, the charge made at
	// admission stands.
	HasCost bool
	// Meters are the actual values of the named meters the handler
	// reported (ReportMeter), for rate-limit rules that charge a meter
	// other than the default one (tiers.Rule.Meter); nil when it reported
	// none. Meter returns the value last reported for name, and whether
	// one was: a rule whose meter was not reported keeps its estimate.
	// Cost and HasCost are the default meter's. A transport fills it;
	// its value should be comparable (a pointer), as Result then is.
	Meters interface {
		Meter(name string) (n int64, ok bool)
	}
	// RetryAfter is, for an outgoing call (package interceptor's
	// outbound RoundTripper and client interceptors), what the peer
	// refused it with: the delay of an HTTP 429 or 503 Retry-After, or of
	// a gRPC RESOURCE_EXHAUSTED or UNAVAILABLE status's RetryInfo or
	// pushback; negative for an HTTP 429 that named no delay (the
	// refusing stage's default then applies); 0 when the peer did not
	// refuse the call for load, and for every incoming request. A stage
	// that shares the peer's back-off (the guard's outbound cooldown)
	// reads it.
	RetryAfter time.Duration
}

// Ignored is the Result of a request that a stage admitted but that never
// ran: a later stage of a Chain denied it. It refunds what was charged
// (HasCost with Cost 0) and gives no latency sample.
var Ignored = Result{Outcome: OutcomeIgnored, HasCost: true}

// ReportCost records the actual cost of the request in ctx, for rate-limit
// stages that charged it on an estimate: the transport passes it to every
// stage's Done as Result.Cost when the request finishes. A handler calls it
// once it knows the cost (tokens generated, rows scanned); a later call
// replaces an earlier one. It reports the default meter: a cost counted
// by several meters (input and output tokens) is reported per meter with
// ReportMeter. It returns an error, and records nothing, when
// n is negative or ctx carries no Request of a floodgate interceptor (the
// handler is not behind one).
func ReportCost(ctx context.Context, n int64) error {
	if n < 0 {
		return fmt.Errorf("floodgate: ReportCost: negative cost %d", n)
	}
	if !reqctx.SetCost(ctx, n) {
		return errors.New("floodgate: ReportCost: the context carries no floodgate request (is the handler behind a floodgate interceptor?)")
	}
	return nil
}

// ReportMeter records the actual value of the named meter for the
// request in ctx (tokens generated, bytes sent), as ReportCost does for
// the default meter: the transport passes it to every stage's Done in
// Result.Meters when the request finishes, and each rate-limit rule that
// charges that meter (tiers.Rule.Meter) settles its estimate to it. A
// handler calls it once per meter it knows, after the response for a
// count known only then; a later call for the same meter replaces an
// earlier one. Called before admission (from package interceptor's
// WithCost func, on the context it is given), it is the meter's
// estimate, which those rules charge at admission; a meter not reported
// again keeps it. The name "" is the default meter: ReportMeter(ctx, "", n)
// is ReportCost(ctx, n). It returns an error, and records nothing, when
// the name is not one a policy can give (1 to 64 of [A-Za-z0-9_.-]), n is
// negative, or ctx carries no Request of a floodgate interceptor. A
// request's first named meter allocates; ReportCost never does.
func ReportMeter(ctx context.Context, meter string, n int64) error {
	if meter == "" {
		return ReportCost(ctx, n)
	}
	if err := syntax.Meter(meter); err != nil {
		return fmt.Errorf("floodgate: ReportMeter: meter %s", err)
	}
	if n < 0 {
		return fmt.Errorf("floodgate: ReportMeter: meter %q: negative value %d", meter, n)
	}
	if !reqctx.SetMeter(ctx, meter, n) {
		return errors.New("floodgate: ReportMeter: the context carries no floodgate request (is the handler behind a floodgate interceptor?)")
	}
	return nil
}

// Admitter is one stage of the chain.
//
// Admit decides on r. When the returned Decision allows, the returned Done
// (if non-nil) must be called once when the request finishes. When it
// denies, Done is nil. The Decision is always what to do; a non-nil error
// explains a degraded decision and is meant for logs and telemetry.
//
// Admitters must be safe for concurrent use and must not retain r after
// Done is called (or after a deny). An Admitter that wraps another has a
// method Unwrap() Admitter returning it, so that what the wrapped stage
// offers is still found (As, All; see the package doc).
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
// stage that denies, calls the Done of the stages already passed with
// Ignored (no latency sample; a charge refunded), and returns
// the denying stage's Decision. When every stage allows, it returns the
// Decision of the last stage that named a Policy (the rate-limit stage, when
// present, so transports can send its quota headers), and a Done that calls
// every stage's Done in reverse order with the same Result.
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
			releaseReverse(dones, Ignored)
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
		return result, func(res Result) {
			if d3 != nil {
				d3(res)
			}
			if d2 != nil {
				d2(res)
			}
			d1(res)
			d0(res)
		}, joinErrors(errs)
	}
	heap := append([]Done(nil), dones...)
	return result, func(res Result) { releaseReverse(heap, res) }, joinErrors(errs)
}

func releaseReverse(dones []Done, res Result) {
	for i := len(dones) - 1; i >= 0; i-- {
		dones[i](res)
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
