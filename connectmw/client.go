package connectmw

import (
	"context"
	"errors"

	"connectrpc.com/connect"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/floodgate-go/floodgate/interceptor"
	"github.com/floodgate-go/floodgate/internal/seam"
)

// NewClient returns the connect.Interceptor of a Connect client
// (connect.WithInterceptors) that retries unary calls as
// interceptor.UnaryClient retries gRPC calls, in every protocol: a call
// denied with RESOURCE_EXHAUSTED or UNAVAILABLE is retried only when the
// server said when (the grpc-retry-pushback-ms field first, then the
// RetryInfo detail), waiting at least that long plus jitter, for at most
// interceptor.WithMaxAttempts attempts, and never past the context's
// deadline. Server streams are retried as interceptor.StreamClient
// retries them, when their first answer is such a denial; client and bidi
// streams are not (see WrapStreamingClient). interceptor.WithThrottle adds
// client-side adaptive throttling of every call and stream
// (IsClientThrottled tells a call it did not send). The error names every
// invalid option. On a handler it lets every call through.
func NewClient(opts ...interceptor.ClientOption) (connect.Interceptor, error) {
	r, err := seam.NewRetrier(opts...)
	if err != nil {
		return nil, err
	}
	return &client{r: r}, nil
}

// client is the Interceptor of NewClient.
type client struct{ r seam.Retrier }

// WrapUnary retries a client's unary calls.
func (c *client) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc {
	return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
		if !req.Spec().IsClient {
			return next(ctx, req)
		}
		var resp connect.AnyResponse
		err := c.r.Do(ctx, func() (metadata.MD, error) {
			var err error
			resp, err = next(ctx, req)
			if err == nil {
				return nil, nil
			}
			if st, ok := grpcStatus(err); ok {
				return trailer(err), &statusError{err: err, st: st}
			}
			return nil, err
		})
		var se *statusError
		switch {
		case err == nil:
			return resp, nil
		case errors.As(err, &se):
			return nil, se.err
		case interceptor.IsClientThrottled(err):
			return nil, throttledError(err)
		}
		return nil, err
	}
}

// WrapStreamingHandler leaves a handler's streams as they are.
func (c *client) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return next
}

// statusError carries an attempt's Connect error to the Retrier with its
// gRPC status.
type statusError struct {
	err error
	st  *status.Status
}

func (e *statusError) Error() string              { return e.err.Error() }
func (e *statusError) Unwrap() error              { return e.err }
func (e *statusError) GRPCStatus() *status.Status { return e.st }

// throttledError is the Connect error of a call the throttle did not
// send: UNAVAILABLE with the ErrorInfo of reason
// interceptor.ReasonClientThrottled.
func throttledError(err error) error {
	st, _ := status.FromError(err)
	e := connect.NewError(connect.CodeUnavailable, errors.New(st.Message()))
	for _, d := range st.Proto().GetDetails() {
		if ed, err := connect.NewErrorDetail(d); err == nil {
			e.AddDetail(ed)
		}
	}
	return e
}

// IsClientThrottled reports whether err is the error of a call a NewClient
// interceptor with interceptor.WithThrottle did not send.
func IsClientThrottled(err error) bool {
	var ce *connect.Error
	if !errors.As(err, &ce) || ce.Code() != connect.CodeUnavailable {
		return false
	}
	for _, d := range ce.Details() {
		if v, err := d.Value(); err == nil {
			if ei, ok := v.(*errdetails.ErrorInfo); ok && ei.GetReason() == interceptor.ReasonClientThrottled {
				return true
			}
		}
	}
	return false
}
