// Package seam is what package interceptor lends the adapters of other
// transports and middleware in this repository, which are modules of
// their own: module connectmw admits Connect calls through a Gate and
// retries a Connect client's calls through a Retrier; module grpcmw hands
// the client address go-grpc-middleware's realip resolved to the
// Interceptor (WithClientAddr) and its log fields ask InStreamMessage. A
// user reaches these through those modules (or package guard), never
// through this package.
//
// What it decides: how an admitted call that ended with a gRPC code is
// released (CallResult, CodeOutcome, which package interceptor's own
// gRPC interceptors use too) and how a per-message decision is marked in
// its context. Everything else is package interceptor's: it supplies
// NewGate, NewRetrier and WithClientAddr when it is linked (SetNewGate,
// SetNewRetrier and SetWithClientAddr, from its init), over its own
// types.
package seam

import (
	"context"
	"errors"
	"net/http"
	"net/netip"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/internal/reqctx"
)

// Call is one call of a transport package interceptor does not serve
// itself (a Connect call, for connectmw), as a Gate admits it.
type Call struct {
	// Method is the gRPC full method, "/pkg.Service/Method": a policy's
	// rules and methods: section, WithMethods, the proto annotations and
	// WithSkip read it.
	Method string
	// Header holds the request headers (gRPC metadata): the extractors,
	// WithPriorityHeader, the trusted-proxy walk and a policy's header
	// rules read them.
	Header http.Header
	// RemoteAddr is the immediate peer, "host:port" or an address.
	RemoteAddr string
	// Message is a unary call's decoded request, for FromMessage and
	// FromProtoField; nil for a stream, which is admitted as it opens.
	Message any
	// ResponseHeader, when set, returns the header of the response of the
	// call whose context it is given, where Admit adds what an admitted
	// call's response carries: the Server-Timing metric
	// "floodgate-wait;dur=<ms>" of a call a rate-limit rule held before
	// letting it proceed (max_wait), and X-RateLimit-Soft-Exceeded naming
	// the soft limits a call went over, as UnaryServer sends them. It is
	// called only then.
	ResponseHeader func(ctx context.Context) http.Header
}

// Denial is what a denied call is answered with, for an adapter that
// sends it in its transport's terms: what the Interceptor's UnaryServer
// and HTTP send for the same Decision, WithDenyResponse's message
// included.
type Denial struct {
	// Status is the gRPC status: code, message and details
	// (interceptor.DenyStatus, with WithDenyResponse's Message when set).
	Status *status.Status
	// Header holds the HTTP fields of the denial: Retry-After, the
	// RateLimit-Policy and RateLimit fields (and X-RateLimit-* with
	// WithLegacyHeaders) and Cache-Control; never Content-Type or
	// Content-Length.
	Header http.Header
	// Pushback is the value of the grpc-retry-pushback-ms trailer
	// (interceptor.PushbackTrailer): the retry delay in milliseconds
	// rounded up, or "-1" ("do not retry") when waiting cannot help.
	Pushback string
}

// Gate admits the calls of a transport package interceptor does not serve
// itself through one stage or floodgate.Chain, with an Interceptor's
// options, as its UnaryServer and StreamServer admit gRPC calls. Make one
// with NewGate. It is safe for concurrent use.
type Gate interface {
	// Admit decides c. It returns the context the handler runs with,
	// which carries the floodgate.Request (floodgate.FromContext; one an
	// earlier floodgate interceptor built is reused), and either the
	// stage's Done, or the Denial to answer with. Done is nil when c is
	// exempt (health checks, WithSkip) or the stage holds nothing;
	// otherwise call it exactly once, when the call ends, with CallResult
	// (with floodgate.Ignored when the handler panicked or a later stage
	// denied the call).
	Admit(ctx context.Context, c Call) (context.Context, floodgate.Done, *Denial)
	// AdmitMessage charges one message the client sent on a stream Admit
	// let through, when the Interceptor was made WithPerMessage; ctx is
	// the context Admit returned. It returns the Denial that ends the
	// stream, or nil: always nil without WithPerMessage, or when ctx
	// carries no floodgate.Request (an exempt stream). As with
	// StreamServer, the message's admission is released at once.
	AdmitMessage(ctx context.Context) *Denial
}

// Retrier applies interceptor.UnaryClient's rules (retries the server
// asked for, and WithThrottle) to the calls of a client of another
// transport. It is safe for concurrent use; its throttle, if any, is
// shared by every call made through it.
//
// Do serves a call whose attempt runs within one function call. A
// stream's attempt does not: it is let through or refused when the stream
// opens (before the caller's first Send, which a refused stream fails),
// and answered at the caller's first Receive, in calls that return to the
// caller in between; so a stream asks the throttle with Open and
// Answered, and decides a retry with Wait, as StreamClient does.
type Retrier interface {
	// Do runs attempt, one attempt of a call, and runs it again while
	// UnaryClient would retry: the error is RESOURCE_EXHAUSTED or
	// UNAVAILABLE and the server said when (the pushback trailer in the
	// trailer attempt returns, else RetryInfo), waiting that long plus
	// jitter, for at most WithMaxAttempts attempts and never past ctx's
	// deadline. attempt's error must carry its gRPC status (a status
	// error, or one with a GRPCStatus method) for the retry rules and the
	// throttle to read it. Do returns the last attempt's error, or the
	// throttle's error (interceptor.IsClientThrottled) for an attempt the
	// throttle did not send.
	Do(ctx context.Context, attempt func() (metadata.MD, error)) error
	// Open asks the throttle (WithThrottle) whether to send one attempt
	// of a stream: nil to send it, then Answered with its first answer;
	// or the throttle's error (interceptor.IsClientThrottled) for an
	// attempt not to send. Without a throttle it always returns nil.
	Open() error
	// Answered tells the throttle how an attempt Open let through was
	// first answered (its first message, nil; or the error it ended
	// with), as StreamClient does; without a throttle it does nothing.
	Answered(err error)
	// Wait decides, as Do does, whether attempt n (1 for the first) of a
	// call that failed with err and trailer is retried, and waits the
	// server's delay plus jitter: false means the call ends with err. err
	// must carry its gRPC status, as in Do.
	Wait(ctx context.Context, n int, err error, trailer metadata.MD) bool
}

// newGate, newRetrier and withClientAddr are what SetNewGate,
// SetNewRetrier and SetWithClientAddr were given: funcs over package
// interceptor's own types, which this package cannot name (interceptor
// imports it).
var newGate, newRetrier, withClientAddr any

// errUnlinked is the error of NewGate, NewRetrier and WithClientAddr when
// package interceptor did not supply them with the types the caller uses.
var errUnlinked = errors.New("seam: package interceptor did not supply this constructor for these types")

// SetNewGate is how package interceptor supplies NewGate, from its init:
// f returns the Gate of fg (an *interceptor.Interceptor) admitting calls
// through a.
func SetNewGate[I any](f func(fg I, a floodgate.Admitter) Gate) { newGate = f }

// NewGate returns a Gate admitting calls through a with the options of
// fg, an *interceptor.Interceptor. It panics, as the gRPC interceptors'
// constructors do, if a is nil, or if a rule of a stage's policy can never
// apply and fg was made WithStrictIdentity; the adapter turns that panic
// into its constructor's error. The error is for an fg of another type.
func NewGate[I any](fg I, a floodgate.Admitter) (Gate, error) {
	f, ok := newGate.(func(I, floodgate.Admitter) Gate)
	if !ok {
		return nil, errUnlinked
	}
	return f(fg, a), nil
}

// SetNewRetrier is how package interceptor supplies NewRetrier, from its
// init: f returns a Retrier with the client options opts
// (interceptor.ClientOption), or an error naming every invalid one.
func SetNewRetrier[O any](f func(opts ...O) (Retrier, error)) { newRetrier = f }

// NewRetrier returns a Retrier with interceptor.UnaryClient's options
// opts. The error names every invalid option.
func NewRetrier[O any](opts ...O) (Retrier, error) {
	f, ok := newRetrier.(func(...O) (Retrier, error))
	if !ok {
		return nil, errUnlinked
	}
	return f(opts...)
}

// SetWithClientAddr is how package interceptor supplies WithClientAddr,
// from its init: f returns the interceptor.Option taking the client
// address from addr.
func SetWithClientAddr[O any](f func(addr func(ctx context.Context) (netip.Addr, bool)) O) {
	withClientAddr = f
}

// WithClientAddr returns the interceptor.Option (O) that takes the client
// address (Identity.IP) from addr, a function over the call's context,
// instead of resolving it from the peer and the forwarding header: how a
// middleware that already resolved the client, and runs before floodgate,
// hands its answer over (go-grpc-middleware v2's realip.FromContext has
// this signature). When addr reports false or an invalid address, the
// address is resolved as without the option. The error is for an O that
// is not interceptor.Option.
func WithClientAddr[O any](addr func(ctx context.Context) (netip.Addr, bool)) (O, error) {
	f, ok := withClientAddr.(func(func(context.Context) (netip.Addr, bool)) O)
	if !ok {
		var zero O
		return zero, errUnlinked
	}
	return f(addr), nil
}

// CodeOutcome classifies how an admitted call that ended with the gRPC
// code (codes.OK when it succeeded) ended: OutcomeSuccess for OK;
// OutcomeDropped for DeadlineExceeded, ResourceExhausted and Unavailable
// (overload signals); OutcomeIgnored for Canceled; OutcomeFailed for any
// other code.
func CodeOutcome(code codes.Code) floodgate.Outcome {
	switch code {
	case codes.OK:
		return floodgate.OutcomeSuccess
	case codes.DeadlineExceeded, codes.ResourceExhausted, codes.Unavailable:
		return floodgate.OutcomeDropped
	case codes.Canceled:
		return floodgate.OutcomeIgnored
	}
	return floodgate.OutcomeFailed
}

// CallResult is the floodgate.Result an admitted call that ended with the
// gRPC code gives a Gate's Done: CodeOutcome's outcome, with the cost the
// handler reported on ctx (floodgate.ReportCost).
func CallResult(ctx context.Context, code codes.Code) floodgate.Result {
	return Result(ctx, CodeOutcome(code))
}

// Result is what a transport hands every admitted stage's Done: the
// outcome o and, when the handler called floodgate.ReportCost, the actual
// cost, and when it called floodgate.ReportMeter, the named meters'.
func Result(ctx context.Context, o floodgate.Outcome) floodgate.Result {
	res := floodgate.Result{Outcome: o}
	var m *reqctx.Meters
	res.Cost, res.HasCost, m = reqctx.Costs(ctx)
	if m != nil { // never a nil *Meters in the interface
		res.Meters = m
	}
	return res
}

// streamMessageKey marks the context of a decision on one message of a
// stream (WithStreamMessage).
type streamMessageKey struct{}

// WithStreamMessage returns ctx marked as the context of a decision on
// one message of a stream (interceptor.WithPerMessage), made while the
// handler runs.
func WithStreamMessage(ctx context.Context) context.Context {
	return context.WithValue(ctx, streamMessageKey{}, true)
}

// InStreamMessage reports whether ctx is the context of a decision on
// one message of a stream (WithStreamMessage), rather than of the
// decision made as the call opens, before any handler code. An Observer
// that updates per-call state which is not safe for concurrent use once
// the handler runs (go-grpc-middleware's logging.AddFields, in module
// grpcmw) checks it.
func InStreamMessage(ctx context.Context) bool {
	v, _ := ctx.Value(streamMessageKey{}).(bool)
	return v
}
