package connectmw

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"connectrpc.com/connect"
	spb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/interceptor"
	"github.com/floodgate-go/floodgate/internal/seam"
)

// NewHandler returns the connect.Interceptor admitting the calls of a
// Connect handler (connect.WithInterceptors) through a: one stage, or a
// floodgate.Chain. fg's options (identity, trusted proxies, methods, the
// observers, WithDenyResponse's message, WithPerMessage) apply as they do
// to fg.UnaryServer. The error names a nil fg or a, and, with
// interceptor.WithStrictIdentity, a rule of a stage's policy that can
// never apply (where fg.UnaryServer panics). On a client it lets every
// call through.
func NewHandler(fg *interceptor.Interceptor, a floodgate.Admitter) (i connect.Interceptor, err error) {
	var errs []error
	if fg == nil {
		errs = append(errs, errors.New("connectmw: NewHandler: nil Interceptor"))
	}
	if a == nil {
		errs = append(errs, errors.New("connectmw: NewHandler: nil Admitter"))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	defer func() {
		// The Gate panics on a configuration mistake it finds while
		// wrapping a (interceptor.WithStrictIdentity); return it instead.
		if r := recover(); r != nil {
			i, err = nil, fmt.Errorf("connectmw: NewHandler: %v", r)
		}
	}()
	gate, err := seam.NewGate(fg, a)
	if err != nil {
		return nil, fmt.Errorf("connectmw: NewHandler: %w", err)
	}
	return &handler{gate: gate}, nil
}

// handler is the Interceptor of NewHandler.
type handler struct{ gate seam.Gate }

func call(spec connect.Spec, peer connect.Peer, h map[string][]string, msg any, response func(context.Context) http.Header) seam.Call {
	return seam.Call{Method: spec.Procedure, Header: h, RemoteAddr: peer.Addr, Message: msg, ResponseHeader: response}
}

// unaryHeader returns the header of the response of a unary handler call
// (connect.CallInfoForHandlerContext; a function, not a closure, so the
// allowed path allocates nothing for it).
func unaryHeader(ctx context.Context) http.Header {
	if info, ok := connect.CallInfoForHandlerContext(ctx); ok {
		return info.ResponseHeader()
	}
	return http.Header{} // nowhere to send it
}

// WrapUnary admits a unary handler call before the handler runs.
func (h *handler) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc {
	return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
		if req.Spec().IsClient {
			return next(ctx, req)
		}
		ctx, done, den := h.gate.Admit(ctx, call(req.Spec(), req.Peer(), req.Header(), req.Any(), unaryHeader))
		if den != nil {
			return nil, &stageDenial{err: denyError(den)}
		}
		if done == nil {
			return next(ctx, req)
		}
		ran := false
		defer release(ctx, done, &ran)
		resp, err := next(ctx, req)
		ran = true
		done(result(ctx, err))
		return resp, err
	}
}

// WrapStreamingClient leaves a client's streams as they are.
func (h *handler) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return next
}

// WrapStreamingHandler admits a stream once, as it opens (and each
// received message with interceptor.WithPerMessage).
func (h *handler) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return func(ctx context.Context, conn connect.StreamingHandlerConn) error {
		ctx, done, den := h.gate.Admit(ctx, call(conn.Spec(), conn.Peer(), conn.RequestHeader(), nil, func(context.Context) http.Header { return conn.ResponseHeader() }))
		if den != nil {
			return &stageDenial{err: denyError(den)}
		}
		conn = &messageConn{StreamingHandlerConn: conn, gate: h.gate, ctx: ctx}
		if done == nil {
			return next(ctx, conn)
		}
		ran := false
		defer release(ctx, done, &ran)
		err := next(ctx, conn)
		ran = true
		done(result(ctx, err))
		return err
	}
}

// messageConn charges every received message of an admitted stream when
// the Interceptor was made WithPerMessage (seam.Gate.AdmitMessage).
type messageConn struct {
	connect.StreamingHandlerConn
	gate seam.Gate
	ctx  context.Context
}

func (c *messageConn) Receive(m any) error {
	if err := c.StreamingHandlerConn.Receive(m); err != nil {
		return err
	}
	if den := c.gate.AdmitMessage(c.ctx); den != nil {
		// Not a stageDenial: the stream's own stages see it end with
		// RESOURCE_EXHAUSTED (dropped), as with fg.StreamServer.
		return denyError(den)
	}
	return nil
}

// release gives done the result of a handler that panicked (ran is
// false): ignored, with the cost it reported, as fg.UnaryServer does.
func release(ctx context.Context, done floodgate.Done, ran *bool) {
	if !*ran {
		done(seam.CallResult(ctx, codes.Canceled))
	}
}

// isStageDenial reports whether err is a later stage's denial (AsType,
// not As: As's target escapes, one allocation per call).
func isStageDenial(err error) bool {
	_, ok := errors.AsType[*stageDenial](err)
	return ok
}

// result is the floodgate.Result of a handler that returned err: a later
// floodgate stage's denial releases the stage as floodgate.Ignored, as a
// Chain releases the stages before the one that denied.
func result(ctx context.Context, err error) floodgate.Result {
	switch {
	case err == nil:
		return seam.CallResult(ctx, codes.OK)
	case isStageDenial(err):
		return floodgate.Ignored
	case errors.Is(err, context.DeadlineExceeded):
		return seam.CallResult(ctx, codes.DeadlineExceeded)
	case errors.Is(err, context.Canceled):
		return seam.CallResult(ctx, codes.Canceled)
	}
	return seam.CallResult(ctx, codes.Code(connect.CodeOf(err)))
}

// stageDenial is the error of a call a floodgate stage denied: the
// *connect.Error that Connect sends (errors.As finds it), marked so that
// the stages before the one that denied release the call as ignored.
type stageDenial struct{ err *connect.Error }

func (e *stageDenial) Error() string { return e.err.Error() }
func (e *stageDenial) Unwrap() error { return e.err }

// denyError is the Connect error of a denial: the gRPC status's code,
// message and details (ErrorInfo, RetryInfo, QuotaFailure), and as
// metadata the denial's HTTP fields and the pushback trailer, which every
// protocol sends (the gRPC protocol in its trailers, where grpc-go's
// retry policy reads it).
func denyError(den *seam.Denial) *connect.Error {
	e := connect.NewError(connect.Code(den.Status.Code()), errors.New(den.Status.Message()))
	for _, a := range den.Status.Proto().GetDetails() {
		if d, err := connect.NewErrorDetail(a); err == nil {
			e.AddDetail(d)
		}
	}
	meta := e.Meta()
	for k, v := range den.Header {
		if k != "Cache-Control" { // not a trailer (RFC 9110 6.5.1); Connect sets its own caching
			meta[k] = v
		}
	}
	meta.Set(interceptor.PushbackTrailer, den.Pushback)
	return e
}

// grpcStatus is the gRPC status of a Connect error: its code, message and
// details; ok is false when err is no Connect error.
func grpcStatus(err error) (*status.Status, bool) {
	var ce *connect.Error
	if !errors.As(err, &ce) {
		return nil, false
	}
	p := &spb.Status{Code: int32(ce.Code()), Message: ce.Message()}
	for _, d := range ce.Details() {
		p.Details = append(p.Details, &anypb.Any{TypeUrl: "type.googleapis.com/" + d.Type(), Value: d.Bytes()})
	}
	return status.FromProto(p), true
}

// trailer is a Connect error's metadata (the union of the response's
// headers and trailers) as gRPC metadata.
func trailer(err error) metadata.MD {
	var ce *connect.Error
	if !errors.As(err, &ce) {
		return nil
	}
	md := make(metadata.MD, len(ce.Meta()))
	for k, v := range ce.Meta() {
		md[strings.ToLower(k)] = v
	}
	return md
}

// RetryDelay reports how long the server asked the client to wait before
// retrying a call that failed with err, a *connect.Error (a client's, in
// any protocol): interceptor.RetryDelay on its code, details and metadata.
// The grpc-retry-pushback-ms field first (a negative or malformed value
// means "do not retry"), then the google.rpc.RetryInfo detail. ok is
// false when err is not RESOURCE_EXHAUSTED or UNAVAILABLE, or the server
// gave no (valid) delay.
func RetryDelay(err error) (time.Duration, bool) {
	st, ok := grpcStatus(err)
	if !ok {
		return 0, false
	}
	return interceptor.RetryDelay(st.Err(), trailer(err))
}
