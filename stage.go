package floodgate

import "iter"

// Stage names the kind of stage that made a decision. What a deny by each
// kind means to a client and to telemetry is its Semantics, defined once
// here and read by every transport and by package otel.
type Stage string

// Stages, in chain order.
const (
	StageShedder     Stage = "shedder"
	StageConcurrency Stage = "concurrency"
	StageTiers       Stage = "tiers"
)

// Semantics is what a deny by one kind of stage means, on every transport
// and in telemetry. Stage.Semantics returns it; package interceptor builds
// the gRPC status and the HTTP response of a deny from it, package otel
// labels decisions with it.
type Semantics struct {
	// Label names a deny in telemetry: the floodgate.decision span
	// attribute and metric label of package otel, and the log field of
	// package grpcmw ("limited", "concurrency_limited", "shed"). An
	// allowed decision is "allowed" whatever its stage (Decision.Label).
	Label string
	// GRPCCode is the gRPC status code of a deny, as its number in
	// google.golang.org/grpc/codes: 8 (RESOURCE_EXHAUSTED) or 14
	// (UNAVAILABLE).
	GRPCCode uint32
	// Reason is the google.rpc.ErrorInfo reason of a gRPC deny
	// ("RATE_LIMIT_EXCEEDED").
	Reason string
	// HTTPStatus is the status of an HTTP deny: 429 or 503.
	HTTPStatus int
	// ProblemType is the type of an HTTP deny's application/problem+json
	// body (RFC 9457), one of the problem types of
	// draft-ietf-httpapi-ratelimit-headers.
	ProblemType string
	// ProblemTitle is the title of that body.
	ProblemTitle string
	// Message says what happened ("rate limit exceeded"): it starts the
	// gRPC status message and the problem's detail.
	Message string
	// Quota names the limit a deny of this kind violated, in the
	// description of its google.rpc.QuotaFailure violation ("rate
	// limit"). Empty when such a deny names no quota and sends no
	// QuotaFailure (the shedder).
	Quota string
	// InFlight is true when the quota counts requests in flight
	// ("concurrency limit of 8 in flight reached") rather than requests
	// per window ("rate limit of 10 per 1m0s exceeded").
	InFlight bool
}

// Problem types of draft-ietf-httpapi-ratelimit-headers-10.
const (
	problemQuotaExceeded            = "https://iana.org/assignments/http-problem-types#quota-exceeded"
	problemTemporaryReducedCapacity = "https://iana.org/assignments/http-problem-types#temporary-reduced-capacity"
	quotaExceededTitle              = "Request cannot be satisfied as assigned quota has been exceeded"
)

// rateLimit is the Semantics of StageTiers, and of every kind of stage
// this package does not define.
var rateLimit = Semantics{
	Label:        "limited",
	GRPCCode:     8,
	Reason:       "RATE_LIMIT_EXCEEDED",
	HTTPStatus:   429,
	ProblemType:  problemQuotaExceeded,
	ProblemTitle: quotaExceededTitle,
	Message:      "rate limit exceeded",
	Quota:        "rate limit",
}

// stageSemantics is the one table of what a deny means, one entry per
// kind of stage, in chain order. A new kind of stage is a constant above
// and an entry here.
var stageSemantics = [...]struct {
	stage Stage
	sem   Semantics
}{
	{StageShedder, Semantics{
		Label:        "shed",
		GRPCCode:     14,
		Reason:       "LOAD_SHED",
		HTTPStatus:   503,
		ProblemType:  problemTemporaryReducedCapacity,
		ProblemTitle: "Service temporarily has reduced capacity",
		Message:      "server overloaded: request shed",
	}},
	{StageConcurrency, Semantics{
		Label:        "concurrency_limited",
		GRPCCode:     8,
		Reason:       "CONCURRENCY_LIMIT_EXCEEDED",
		HTTPStatus:   429,
		ProblemType:  problemQuotaExceeded,
		ProblemTitle: quotaExceededTitle,
		Message:      "concurrency limit exceeded",
		Quota:        "concurrency limit",
		InFlight:     true,
	}},
	{StageTiers, rateLimit},
}

// semantics returns a pointer to s's entry of the table, or to rateLimit.
func (s Stage) semantics() *Semantics {
	for i := range stageSemantics {
		if stageSemantics[i].stage == s {
			return &stageSemantics[i].sem
		}
	}
	return &rateLimit
}

// Semantics returns what a deny by a stage of kind s means. A kind this
// package does not define (a stage of the user's, or none) has the
// semantics of StageTiers: its deny is a rate limit.
func (s Stage) Semantics() Semantics { return *s.semantics() }

// Stages returns every kind of stage this package defines, in chain
// order: those whose Semantics are their own.
func Stages() []Stage {
	out := make([]Stage, len(stageSemantics))
	for i := range stageSemantics {
		out[i] = stageSemantics[i].stage
	}
	return out
}

// Label names d in telemetry: "allowed" when d.Allowed, else the Label of
// its stage's Semantics ("limited", "concurrency_limited" or "shed").
func (d Decision) Label() string {
	if d.Allowed {
		return "allowed"
	}
	return d.Stage.semantics().Label
}

// As returns the first Admitter in a's tree that is a T, and whether there
// is one. The tree is a itself, then, depth first, what a wrapper wraps
// (its Unwrap method, see the package doc) and the stages of a Chain, in
// order. It is how a transport finds what a stage offers (per-method
// options, the request headers a policy reads) through wrappers, as
// errors.AsType finds an error in a chain of wrapped errors.
func As[T any](a Admitter) (T, bool) {
	for t := range All[T](a) {
		return t, true
	}
	var zero T
	return zero, false
}

// All yields every Admitter in a's tree (see As) that is a T, depth first.
// It does not look inside an Admitter it yields: a wrapper that is a T
// stands for what it wraps, so a wrapper can change what its stage offers.
// Each stage of a Chain is searched, so a Chain of two rate limiters
// yields both.
func All[T any](a Admitter) iter.Seq[T] {
	return func(yield func(T) bool) { walk(a, yield) }
}

// walk is All's traversal; false means yield asked to stop.
func walk[T any](a Admitter, yield func(T) bool) bool {
	for a != nil {
		if t, ok := a.(T); ok {
			return yield(t)
		}
		switch w := a.(type) {
		case Chain:
			for _, s := range w {
				if !walk(s, yield) {
					return false
				}
			}
			return true
		case interface{ Unwrap() Admitter }:
			a = w.Unwrap()
		default:
			return true
		}
	}
	return true
}
