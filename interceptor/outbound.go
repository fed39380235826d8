package interceptor

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/floodgate-go/floodgate"
)

// outboundError is the error of an outgoing call a stage refused.
type outboundError struct {
	st     *status.Status
	method string
}

func (e *outboundError) Error() string {
	return fmt.Sprintf("floodgate: outbound call %s not sent: %s", e.method, e.st.Message())
}

// GRPCStatus is the refusal's status, for status.FromError and grpc-go.
func (e *outboundError) GRPCStatus() *status.Status { return e.st }

// outboundRequest builds the Request of one outgoing call.
func (i *Interceptor) outboundRequest(ctx context.Context, cl *call) *floodgate.Request {
	r := &floodgate.Request{}
	i.build(ctx, r, cl)
	if in, ok := floodgate.FromContext(ctx); ok {
		id := &r.Identity
		if id.Tenant == "" {
			id.Tenant = in.Identity.Tenant
		}
		if id.User == "" {
			id.User = in.Identity.User
		}
		if id.APIKey == "" {
			id.APIKey = in.Identity.APIKey
		}
		if !id.IP.IsValid() {
			id.IP = in.Identity.IP
		}
		if r.Tier == "" {
			r.Tier = in.Tier
		}
	}
	return r
}

// refuse returns the error of a refused outgoing call.
func (i *Interceptor) refuse(method string, d floodgate.Decision) error {
	return &outboundError{st: DenyStatus(d, i.c.domain), method: method}
}

// RoundTripper returns an http.RoundTripper that admits every request
// through a (one stage or a floodgate.Chain: package guard's outbound
// stages) before base (http.DefaultTransport when nil) sends it. A refused
// request is not sent: RoundTrip closes its body and returns an error that
// status.FromError reads as RESOURCE_EXHAUSTED with RetryInfo, and for
// which IsClientThrottled and RetryDelay(err, nil) answer. A stage that
// holds a request (a rule's max_wait) holds RoundTrip, bounded by the
// request's context. See the package doc, "Outbound calls". It panics if a
// is nil.
func (i *Interceptor) RoundTripper(a floodgate.Admitter, base http.RoundTripper) http.RoundTripper {
	if base == nil {
		base = http.DefaultTransport
	}
	return &roundTripper{i: i, a: i.stage(a), base: base}
}

type roundTripper struct {
	i    *Interceptor
	a    floodgate.Admitter
	base http.RoundTripper
}

// RoundTrip implements http.RoundTripper.
func (t *roundTripper) RoundTrip(req *http.Request) (*http.Response, error) {
	ctx := req.Context()
	method := "/" + req.URL.Host + req.URL.Path
	r := t.i.outboundRequest(ctx, &call{method: method, def: httpPriority(req.Method), md: Metadata{h: req.Header, req: req}})
	d, done := t.i.admit(t.a, ctx, r)
	if !d.Allowed {
		if req.Body != nil {
			_ = req.Body.Close()
		}
		return nil, t.i.refuse(method, d)
	}
	resp, err := t.base.RoundTrip(req)
	if done != nil {
		done(t.i.httpResult(ctx, resp, err))
	}
	return resp, err
}

// httpResult is what an outgoing HTTP call's Done is told.
func (i *Interceptor) httpResult(ctx context.Context, resp *http.Response, err error) floodgate.Result {
	if err != nil {
		if errors.Is(ctx.Err(), context.Canceled) {
			return floodgate.Result{Outcome: floodgate.OutcomeIgnored}
		}
		return floodgate.Result{Outcome: grpcOutcome(err)}
	}
	res := floodgate.Result{Outcome: httpOutcome(resp.StatusCode, ctx)}
	if resp.StatusCode == http.StatusTooManyRequests || resp.StatusCode == http.StatusServiceUnavailable {
		d, ok := parseRetryAfter(resp.Header.Get("Retry-After"), i.c.clock.Now())
		switch {
		case ok:
			res.RetryAfter = d
		case resp.StatusCode == http.StatusTooManyRequests:
			res.RetryAfter = -1
		}
	}
	return res
}

// maxRetryAfter caps a Retry-After's delay-seconds (a day), so that no
// value overflows a Duration; the cooldown caps it far lower.
const maxRetryAfter = 24 * 60 * 60

// parseRetryAfter reads a Retry-After value (RFC 9110 10.2.3):
// delay-seconds, or an HTTP-date, taken relative to now. A date in the
// past is no delay (ok false); so is an unparsable or empty value.
func parseRetryAfter(v string, now time.Time) (time.Duration, bool) {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0, false
	}
	if v[0] >= '0' && v[0] <= '9' {
		s, err := strconv.ParseInt(v, 10, 64)
		if err != nil || s <= 0 {
			return 0, false
		}
		return time.Duration(min(s, maxRetryAfter)) * time.Second, true
	}
	t, err := http.ParseTime(v)
	if err != nil {
		return 0, false
	}
	if d := t.Sub(now); d > 0 {
		return d, true
	}
	return 0, false
}

// grpcResult is what an outgoing gRPC call's Done is told.
func grpcResult(err error, trailer metadata.MD) floodgate.Result {
	res := floodgate.Result{Outcome: grpcOutcome(err)}
	if c := status.Code(err); c == codes.ResourceExhausted || c == codes.Unavailable {
		if d, ok := RetryDelay(err, trailer); ok && d > 0 {
			res.RetryAfter = d
		}
	}
	return res
}

// UnaryOutbound returns a gRPC unary client interceptor that admits every
// call through a before it is sent; a refused call returns the status a
// server would send (RESOURCE_EXHAUSTED with RetryInfo) without being
// sent. Put it after UnaryClient in a chain (grpc.WithChainUnaryInterceptor(
// UnaryClient(...), i.UnaryOutbound(a))), so that each attempt is
// admitted. See the package doc, "Outbound calls". It panics if a is nil.
func (i *Interceptor) UnaryOutbound(a floodgate.Admitter) grpc.UnaryClientInterceptor {
	a = i.stage(a)
	return func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		r := i.outboundRequest(ctx, &call{method: method, grpcMethod: true, md: outgoingMetadata(ctx, req)})
		d, done := i.admit(a, ctx, r)
		if !d.Allowed {
			return i.refuse(method, d)
		}
		if done == nil {
			return invoker(ctx, method, req, reply, cc, opts...)
		}
		var trailer metadata.MD
		err := invoker(ctx, method, req, reply, cc, append(opts, grpc.Trailer(&trailer))...)
		done(grpcResult(err, trailer))
		return err
	}
}

// StreamOutbound is UnaryOutbound for streams: a stream is admitted when
// it opens, and its Done is told how it ended at NewStream's error or at
// its first receive error (io.EOF: success).
func (i *Interceptor) StreamOutbound(a floodgate.Admitter) grpc.StreamClientInterceptor {
	a = i.stage(a)
	return func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
		r := i.outboundRequest(ctx, &call{method: method, grpcMethod: true, md: outgoingMetadata(ctx, nil)})
		d, done := i.admit(a, ctx, r)
		if !d.Allowed {
			return nil, i.refuse(method, d)
		}
		cs, err := streamer(ctx, desc, cc, method, opts...)
		if done == nil {
			return cs, err
		}
		if err != nil {
			done(grpcResult(err, nil))
			return nil, err
		}
		return &outboundStream{ClientStream: cs, done: done}, nil
	}
}

type outboundStream struct {
	grpc.ClientStream
	once sync.Once
	done floodgate.Done
}

func (s *outboundStream) RecvMsg(m any) error {
	err := s.ClientStream.RecvMsg(m)
	if err != nil {
		s.once.Do(func() {
			if errors.Is(err, io.EOF) {
				s.done(floodgate.Result{Outcome: floodgate.OutcomeSuccess})
				return
			}
			s.done(grpcResult(err, s.Trailer()))
		})
	}
	return err
}

// outgoingMetadata is the Metadata of an outgoing gRPC call: its outgoing
// metadata and, for a unary call, its request message.
func outgoingMetadata(ctx context.Context, msg any) Metadata {
	md, _ := metadata.FromOutgoingContext(ctx)
	h := make(http.Header, len(md))
	for k, v := range md {
		h[http.CanonicalHeaderKey(k)] = v
	}
	return Metadata{h: h, msg: msg}
}
