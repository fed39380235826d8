package interceptor

import (
	"context"
	"errors"
	"net/http"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/internal/seam"
)

// grpcOutcome classifies how a gRPC handler ended. Overload signals
// (DeadlineExceeded, ResourceExhausted, Unavailable, or a context deadline
// returned as is) are OutcomeDropped; a client cancellation is
// OutcomeIgnored; any other error OutcomeFailed.
func grpcOutcome(err error) floodgate.Outcome {
	if err == nil {
		return floodgate.OutcomeSuccess
	}
	switch {
	case errors.Is(err, context.DeadlineExceeded):
		return floodgate.OutcomeDropped
	case errors.Is(err, context.Canceled):
		return floodgate.OutcomeIgnored
	}
	if c := status.Code(err); c != codes.OK {
		return seam.CodeOutcome(c)
	}
	return floodgate.OutcomeFailed
}

// httpOutcome classifies how an HTTP handler ended from the status it
// wrote (0 when it wrote nothing: 200) and whether the client went away
// first.
func httpOutcome(code int, ctx context.Context) floodgate.Outcome {
	switch {
	case code == http.StatusTooManyRequests, code == http.StatusServiceUnavailable, code == http.StatusGatewayTimeout:
		return floodgate.OutcomeDropped
	case code >= 500:
		return floodgate.OutcomeFailed
	case errors.Is(ctx.Err(), context.Canceled):
		return floodgate.OutcomeIgnored
	case code >= 400:
		return floodgate.OutcomeFailed
	}
	return floodgate.OutcomeSuccess
}

// result is what the transport hands every admitted stage's Done: the
// outcome and, when the handler called floodgate.ReportCost, the actual
// cost (seam.Result, which adapters of other transports use too).
func result(ctx context.Context, o floodgate.Outcome) floodgate.Result {
	return seam.Result(ctx, o)
}

// finish calls done once the handler has returned (ran is true) or
// panicked (ran is false: OutcomeIgnored, the cost as reported).
func finish(done floodgate.Done, ctx context.Context, ran *bool, o *floodgate.Outcome) {
	switch {
	case !*ran:
		done(result(ctx, floodgate.OutcomeIgnored))
	case *o == laterDenied:
		done(floodgate.Ignored)
	default:
		done(result(ctx, *o))
	}
}

// laterDenied is the outcome, never given to a Done, of a call a later
// floodgate stage denied at admission (one interceptor per stage): the
// stage releases it as floodgate.Ignored, as a Chain releases the stages
// before the one that denied, not as an overload signal or a failure.
const laterDenied floodgate.Outcome = 255

// stageDenial is the status error of a call a stage denied at admission,
// so that the stages before it know it from a handler's own
// RESOURCE_EXHAUSTED.
type stageDenial struct {
	error
	st *status.Status
}

// GRPCStatus is the denial's status, for grpc-go.
func (e *stageDenial) GRPCStatus() *status.Status { return e.st }

// denial returns st's error, marked as a stage's denial.
func denial(st *status.Status) error { return &stageDenial{error: st.Err(), st: st} }

// grpcOutcomeOf is grpcOutcome, or laterDenied for a stage's denial.
func grpcOutcomeOf(err error) floodgate.Outcome {
	if err == nil {
		return floodgate.OutcomeSuccess
	}
	// AsType, not As: As's target escapes, one allocation per call.
	if _, ok := errors.AsType[*stageDenial](err); ok {
		return laterDenied
	}
	return grpcOutcome(err)
}

// statusWriter records the status code an HTTP handler wrote, for the
// request's Outcome. It unwraps for http.ResponseController.
type statusWriter struct {
	http.ResponseWriter
	code   int
	denied bool // a later stage wrote its deny (see laterDenied)
}

// WriteHeader records the final status: an informational one (1xx, such
// as 103 Early Hints) precedes it and says nothing of the outcome.
func (w *statusWriter) WriteHeader(code int) {
	if w.code == 0 && (code < 100 || code > 199) {
		w.code = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	if w.code == 0 {
		w.code = http.StatusOK
	}
	return w.ResponseWriter.Write(b)
}

// Flush passes flushes through for streaming handlers that type-assert
// http.Flusher rather than use http.ResponseController.
func (w *statusWriter) Flush() {
	if w.code == 0 {
		w.code = http.StatusOK
	}
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

// Unwrap returns the wrapped ResponseWriter.
func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }
