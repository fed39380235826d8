package interceptor

import (
	"context"
	"net/http"

	"google.golang.org/grpc/codes"

	"github.com/floodgate-go/floodgate"
)

// Call is one call of a transport this package does not serve itself (a
// Connect call, for connectmw), as a Gate admits it.
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
	// letting it proceed (max_wait), as UnaryServer sends it. It is called
	// only then.
	ResponseHeader func(ctx context.Context) http.Header
}

// Gate admits the calls of a transport this package does not serve itself
// through one stage or floodgate.Chain, with the Interceptor's options, as
// UnaryServer and StreamServer admit gRPC calls; it is the seam for
// adapters such as connectmw, which answer a denial in their transport's
// own terms from its Denial. Make one with Interceptor.Gate.
type Gate struct {
	i *Interceptor
	a floodgate.Admitter
}

// Gate returns a Gate admitting calls through a. It panics if a is nil,
// and with WithStrictIdentity if a rule of a stage's policy can never
// apply.
func (i *Interceptor) Gate(a floodgate.Admitter) *Gate {
	i.requireScopes(a, transportGRPC)
	return &Gate{i: i, a: i.stage(a)}
}

// Admit decides c. It returns the context the handler runs with, which
// carries the floodgate.Request (floodgate.FromContext; one an earlier
// floodgate interceptor built is reused), and either the stage's Done, or
// the Denial to answer with. Done is nil when c is exempt (health checks,
// WithSkip) or the stage holds nothing; otherwise call it exactly once,
// when the call ends, with CallResult (with floodgate.Ignored when the
// handler panicked or a later stage denied the call).
func (g *Gate) Admit(ctx context.Context, c Call) (context.Context, floodgate.Done, *Denial) {
	i := g.i
	if i.exempt(c.Method) {
		return ctx, nil, nil
	}
	r, ctx := i.request(ctx, &call{method: c.Method, grpcMethod: true, remoteAddr: c.RemoteAddr, md: Metadata{h: c.Header, msg: c.Message}})
	d, done := i.admit(g.a, ctx, r)
	if !d.Allowed {
		return ctx, nil, i.denial(ctx, d)
	}
	if d.Waited > 0 && c.ResponseHeader != nil {
		c.ResponseHeader(ctx).Add(serverTimingHeader, serverTiming(d.Waited))
	}
	return ctx, done, nil
}

// AdmitMessage charges one message the client sent on a stream Admit let
// through, when the Interceptor was made WithPerMessage; ctx is the
// context Admit returned. It returns the Denial that ends the stream, or
// nil: always nil without WithPerMessage, or when ctx carries no
// floodgate.Request (an exempt stream). As with StreamServer, the
// message's admission is released at once.
func (g *Gate) AdmitMessage(ctx context.Context) *Denial {
	if !g.i.c.perMessage {
		return nil
	}
	r, ok := floodgate.FromContext(ctx)
	if !ok {
		return nil
	}
	ctx = context.WithValue(ctx, streamMessageKey{}, true)
	d, done := g.i.admit(g.a, ctx, r)
	if !d.Allowed {
		return g.i.denial(ctx, d)
	}
	if done != nil {
		done(floodgate.Result{Outcome: floodgate.OutcomeIgnored})
	}
	return nil
}

// CallResult is the floodgate.Result an admitted call that ended with the
// gRPC code (codes.OK when it succeeded) gives a Gate's Done:
// OutcomeSuccess for OK; OutcomeDropped for DeadlineExceeded,
// ResourceExhausted and Unavailable (overload signals); OutcomeIgnored for
// Canceled; OutcomeFailed for any other code; with the cost the handler
// reported on ctx (floodgate.ReportCost).
func CallResult(ctx context.Context, code codes.Code) floodgate.Result {
	return result(ctx, codeOutcome(code))
}

// codeOutcome classifies a gRPC code as grpcOutcome does.
func codeOutcome(code codes.Code) floodgate.Outcome {
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
