package interceptor

import (
	"context"
	"math"
	"net/netip"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	spb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/internal/seam"
)

// healthPrefix is the gRPC health service; its calls are never limited.
const healthPrefix = "/grpc.health.v1.Health/"

// orcaPrefix is the ORCA load report service (out-of-band reports); its
// streams are never limited nor counted in flight.
const orcaPrefix = "/xds.service.orca.v3.OpenRcaService/"

// Interceptor makes the gRPC interceptors and the net/http middleware of
// one chain from one configuration: how a call becomes a floodgate.Request
// (identity, trusted proxies, methods, routes) and how a Decision is
// observed and answered. Build it with New, then make one interceptor per
// stage, in chain order:
//
//	fg, err := interceptor.New(opts...)
//	grpc.ChainUnaryInterceptor(fg.UnaryServer(shed), fg.UnaryServer(conc), fg.UnaryServer(limits))
//
// or around a floodgate.Chain of them:
//
//	handler := fg.HTTP(floodgate.Chain{shed, conc, limits})(mux)
//
// Every interceptor it makes shares the Request the first one builds, and
// the per-method options of every stage it wraps (a *tiers.Limiter's
// policy methods:), so every stage of a call sees one cost and one
// priority. Make all of a chain's interceptors before serving: each one
// adds the method options of the stage it wraps.
type Interceptor struct {
	c        *config
	policies atomic.Pointer[[]methodSource]
	headers  atomic.Pointer[[]headerSource] // stages that name request headers (headerSource)
	hnames   atomic.Pointer[headerNames]
	logs     logs
	tapped   atomic.Bool // a TapHandle was made: calls may carry a tap's admission
}

// New validates opts and returns an Interceptor. The error names every
// invalid option.
func New(opts ...Option) (*Interceptor, error) {
	c, err := newConfig(opts)
	if err != nil {
		return nil, err
	}
	return &Interceptor{c: c}, nil
}

// stage prepares a for the interceptors that wrap it: it records the
// per-method options a offers (every stage of a that has a MethodOptions
// method, found through wrappers and Chains with floodgate.All) and wraps
// a with the observers. It panics when a is nil.
func (i *Interceptor) stage(a floodgate.Admitter) floodgate.Admitter {
	if a == nil {
		panic("interceptor: nil Admitter")
	}
	for src := range floodgate.All[methodSource](a) {
		i.addMethodSource(src)
	}
	for src := range floodgate.All[headerSource](a) {
		i.addHeaderSource(src)
	}
	switch len(i.c.observers) {
	case 0:
	case 1:
		a = observe(a, i.c.observers[0])
	default:
		a = observe(a, fanOut(i.c.observers))
	}
	return a
}

func (i *Interceptor) addMethodSource(src methodSource) {
	for {
		old := i.policies.Load()
		var next []methodSource
		if old != nil {
			for _, have := range *old {
				if have == src {
					return
				}
			}
			next = append(next, *old...)
		}
		next = append(next, src)
		if i.policies.CompareAndSwap(old, &next) {
			return
		}
	}
}

func (i *Interceptor) exempt(method string) bool {
	return strings.HasPrefix(method, healthPrefix) || strings.HasPrefix(method, orcaPrefix) ||
		(i.c.skip != nil && i.c.skip(method))
}

// grpcRequest returns the call's Request and the context carrying it. msg
// is the request message of a unary call (nil for streams), for the
// extractors that read it.
func (i *Interceptor) grpcRequest(ctx context.Context, method string, msg any) (*floodgate.Request, context.Context) {
	return i.request(ctx, &call{method: method, grpcMethod: true, md: Metadata{ctx: ctx, msg: msg}})
}

func peerAddr(ctx context.Context) (a netip.Addr) {
	if p, ok := peer.FromContext(ctx); ok && p != nil {
		return addrFromNet(p.Addr)
	}
	return a
}

// admit runs the stage and logs (rate-limited) an error that came with it.
func (i *Interceptor) admit(a floodgate.Admitter, ctx context.Context, r *floodgate.Request) (floodgate.Decision, floodgate.Done) {
	d, done, err := a.Admit(ctx, r)
	if err != nil {
		i.logStageErr(r, &d, err)
	}
	if !d.Allowed && done != nil {
		// A denying stage must not hold anything; release defensively.
		done(floodgate.Ignored)
		done = nil
	}
	return d, done
}

// logStageErr logs (rate-limited) the error a stage returned with d. A
// call of its own, never inlined: its arguments would otherwise take room
// in admit's frame on every call.
//
//go:noinline
func (i *Interceptor) logStageErr(r *floodgate.Request, d *floodgate.Decision, err error) {
	logThrottled(&i.logs.stageErr, "floodgate: stage returned an error; its decision stands",
		"method", r.Method, "stage", string(d.Stage), "source", string(d.Source), "allowed", d.Allowed, "error", err)
}

// UnaryServer returns a gRPC unary server interceptor admitting calls
// through a: one stage, or a floodgate.Chain. It panics if a is nil, and
// with WithStrictIdentity if a rule of a stage's policy can never apply.
func (i *Interceptor) UnaryServer(a floodgate.Admitter) grpc.UnaryServerInterceptor {
	i.requireScopes(a, transportGRPC)
	s := &served{raw: a, a: i.stage(a)}
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		if i.exempt(info.FullMethod) {
			return handler(ctx, req)
		}
		ctx, done, err := i.gateUnary(s, ctx, info.FullMethod, req)
		if err != nil {
			return nil, err
		}
		if done == nil {
			return handler(ctx, req)
		}
		return runUnary(ctx, req, handler, done)
	}
}

// gateUnary admits a unary call: the context the handler gets and the
// stage's Done, or the status error of a denial (its pushback trailer
// set). It is a call of its own, never inlined, so that the admission's
// locals (a Decision, the deny's status) are off the stack before the
// handler runs: the frames of a chain of interceptors that stay live under
// the handler are a few words each, and a handler goroutine grows its
// stack (a copy of every frame) less often.
//
//go:noinline
func (i *Interceptor) gateUnary(s *served, ctx context.Context, method string, req any) (context.Context, floodgate.Done, error) {
	a := s.a
	if i.tapped.Load() {
		a = s.forCall(ctx) // a tap admitted the call through one of a's stages
	}
	r, ctx := i.grpcRequest(ctx, method, req)
	d, done := i.admit(a, ctx, r)
	if !d.Allowed {
		return ctx, nil, i.denyUnary(ctx, &d)
	}
	waitMD(ctx, d) // max_wait: Server-Timing
	if d.SoftExceeded != "" {
		softMD(ctx, r, d)
	}
	return ctx, done, nil
}

// denyUnary sets a denied unary call's pushback trailer and returns its
// status error. Never inlined, so the deny's locals are not in
// gateUnary's frame on every call.
//
//go:noinline
func (i *Interceptor) denyUnary(ctx context.Context, d *floodgate.Decision) error {
	_ = grpc.SetTrailer(ctx, pushbackMD(*d))
	return denial(i.denyStatus(ctx, *d))
}

// runUnary runs an admitted call's handler and gives its outcome to done,
// also when the handler panics.
func runUnary(ctx context.Context, req any, handler grpc.UnaryHandler, done floodgate.Done) (any, error) {
	var (
		ran     bool
		outcome floodgate.Outcome
	)
	defer finish(done, ctx, &ran, &outcome)
	resp, err := handler(ctx, req)
	ran, outcome = true, grpcOutcomeOf(err)
	return resp, err
}

// StreamServer returns a gRPC stream server interceptor admitting streams
// through a. A stream is charged once when it opens (and per received
// message with WithPerMessage); its Done runs when the handler returns,
// including when the client cancels. It panics if a is nil, and with
// WithStrictIdentity if a rule of a stage's policy can never apply.
func (i *Interceptor) StreamServer(a floodgate.Admitter) grpc.StreamServerInterceptor {
	i.requireScopes(a, transportGRPC)
	s := &served{raw: a, a: i.stage(a)}
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		if i.exempt(info.FullMethod) {
			return handler(srv, ss)
		}
		ss, done, err := i.gateStream(s, ss, info.FullMethod)
		if err != nil {
			return err
		}
		if done == nil {
			return handler(srv, ss)
		}
		var (
			ran     bool
			outcome floodgate.Outcome
		)
		defer finish(done, ss.Context(), &ran, &outcome)
		err = handler(srv, ss)
		ran, outcome = true, grpcOutcomeOf(err)
		return err
	}
}

// gateStream admits a stream: the stream the handler gets (wrapped when
// it carries a new context or WithPerMessage charges its messages) and the
// stage's Done, or the status error of a denial (its pushback trailer
// set). Never inlined, as gateUnary.
//
//go:noinline
func (i *Interceptor) gateStream(s *served, ss grpc.ServerStream, method string) (grpc.ServerStream, floodgate.Done, error) {
	ctx := ss.Context()
	a := s.a
	if i.tapped.Load() {
		a = s.forCall(ctx) // a tap admitted the stream through one of a's stages
	}
	r, nctx := i.grpcRequest(ctx, method, nil)
	d, done := i.admit(a, nctx, r)
	if !d.Allowed {
		ss.SetTrailer(pushbackMD(d))
		return ss, nil, denial(i.denyStatus(nctx, d))
	}
	waitStreamMD(ss, d) // max_wait: Server-Timing
	if d.SoftExceeded != "" {
		softStreamMD(ss, r, d)
	}
	if nctx != ctx || i.c.perMessage {
		w := &serverStream{ServerStream: ss, ctx: nctx, i: i, a: s.a, r: r}
		if i.c.perMessage {
			w.msgCtx = seam.WithStreamMessage(nctx)
		}
		ss = w
	}
	return ss, done, nil
}

type serverStream struct {
	grpc.ServerStream
	ctx    context.Context
	msgCtx context.Context // ctx marked as a message's (seam.WithStreamMessage; WithPerMessage)
	i      *Interceptor
	a      floodgate.Admitter
	r      *floodgate.Request
}

func (s *serverStream) Context() context.Context { return s.ctx }

func (s *serverStream) RecvMsg(m any) error {
	if err := s.ServerStream.RecvMsg(m); err != nil {
		return err
	}
	if !s.i.c.perMessage {
		return nil
	}
	d, done := s.i.admit(s.a, s.msgCtx, s.r)
	if !d.Allowed {
		s.SetTrailer(pushbackMD(d))
		return s.i.denyStatus(s.msgCtx, d).Err()
	}
	if done != nil {
		// A message's charge is made; nothing is held past it and its
		// handling is no latency sample.
		done(floodgate.Result{Outcome: floodgate.OutcomeIgnored})
	}
	return nil
}

// pushbackMD is the grpc-retry-pushback-ms trailer for a deny: the retry
// delay in whole milliseconds rounded up, or -1 ("do not retry", gRFC A6)
// when waiting cannot cure the deny (RetryAfter 0).
func pushbackMD(d floodgate.Decision) metadata.MD {
	return metadata.MD{PushbackTrailer: []string{pushbackValue(d.RetryAfter)}}
}

func pushbackValue(ra time.Duration) string {
	if ra <= 0 {
		return "-1"
	}
	ms := (ra + time.Millisecond - 1) / time.Millisecond
	if ms > math.MaxInt32 {
		ms = math.MaxInt32
	}
	return strconv.FormatInt(int64(ms), 10)
}

// DenyStatus is the gRPC status this package sends for a denying Decision.
// Its code, ErrorInfo reason and message are those of the deciding stage's
// floodgate.Semantics (UNAVAILABLE for the shedder, RESOURCE_EXHAUSTED
// otherwise), with details
//
//   - google.rpc.ErrorInfo: Reason RATE_LIMIT_EXCEEDED (tiers),
//     CONCURRENCY_LIMIT_EXCEEDED (concurrency) or LOAD_SHED (shedder),
//     Domain domain, Metadata "stage" and, unless d.HideQuota, "policy",
//     "limit" and "window_seconds" (each only when known);
//   - google.rpc.RetryInfo with RetryDelay = d.RetryAfter, when positive;
//   - google.rpc.QuotaFailure, for a denial naming a policy by a stage
//     whose Semantics name a Quota (tiers, concurrency), unless
//     d.HideQuota: one violation with Subject and QuotaId the policy name,
//     QuotaValue the limit, and a Description; for a decision with several
//     windows (d.Quotas), one such violation per violated window, the
//     binding first.
//
// It never returns codes.Internal or codes.Unknown.
func DenyStatus(d floodgate.Decision, domain string) *status.Status {
	sem := d.Stage.Semantics()
	code := codes.Code(sem.GRPCCode)
	show := !d.HideQuota && d.Policy != ""
	// The message is built in one buffer and made a string once.
	var buf [128]byte
	b := append(buf[:0], sem.Message...)
	if show {
		b = append(b, " (policy "...)
		b = strconv.AppendQuote(b, d.Policy)
		b = append(b, ')')
	}
	if d.RetryAfter > 0 {
		b = append(b, "; retry after "...)
		b = append(b, d.RetryAfter.String()...)
	}
	msg := string(b)
	fixed := ruleDetails(d, &sem, domain, show)
	if fixed == nil {
		return status.New(code, msg)
	}
	details := make([]*anypb.Any, 0, 3)
	details = append(details, fixed.errorInfo)
	if d.RetryAfter > 0 {
		details = append(details, retryInfo(d.RetryAfter))
	}
	if fixed.quota != nil {
		details = append(details, fixed.quota)
	}
	// FromProto copies the details: the shared ones stay as they are.
	return status.FromProto(&spb.Status{Code: int32(code), Message: msg, Details: details})
}

// quotaViolations lists the QuotaFailure violations of a deny: one per
// violated window of d.Quotas, or the binding policy alone.
func quotaViolations(d floodgate.Decision) []*errdetails.QuotaFailure_Violation {
	one := func(q floodgate.Decision) *errdetails.QuotaFailure_Violation {
		return &errdetails.QuotaFailure_Violation{Subject: q.Policy, Description: quotaDescription(q), QuotaId: q.Policy, QuotaValue: q.Limit}
	}
	qs := d.Quotas()
	if len(qs) < 2 {
		return []*errdetails.QuotaFailure_Violation{one(d)}
	}
	out := make([]*errdetails.QuotaFailure_Violation, 0, len(qs))
	for _, q := range qs {
		if q.Violated {
			out = append(out, one(floodgate.Decision{Stage: d.Stage, Policy: q.Policy, Limit: q.Limit, Window: q.Window}))
		}
	}
	if len(out) == 0 {
		out = append(out, one(d))
	}
	return out
}

// quotaDescription describes the quota d violated, as its stage's
// Semantics name it: "rate limit of 10 per 1m0s exceeded", "concurrency
// limit of 8 in flight reached".
func quotaDescription(d floodgate.Decision) string {
	sem := d.Stage.Semantics()
	var b strings.Builder
	b.WriteString(sem.Quota)
	if d.Limit > 0 {
		b.WriteString(" of ")
		b.WriteString(strconv.FormatInt(d.Limit, 10))
		if sem.InFlight {
			b.WriteString(" in flight")
		} else if d.Window > 0 {
			b.WriteString(" per ")
			b.WriteString(d.Window.String())
		}
	}
	if sem.InFlight {
		b.WriteString(" reached")
	} else {
		b.WriteString(" exceeded")
	}
	return b.String()
}

// ceilSeconds rounds d up to whole seconds.
func ceilSeconds(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	return int64((d + time.Second - 1) / time.Second)
}
