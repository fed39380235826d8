package shedder

import (
	"math"
	"strconv"
	"strings"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/internal/field"
)

// grpcAttempts is the metadata a gRPC client that retries (gRFC A6, as
// grpc-go's retry policy does) sends on every attempt after the first:
// how many attempts came before it.
const grpcAttempts = "grpc-previous-rpc-attempts"

// Retries sheds retries of a priority before its first attempts (see
// WithRetries): a retry of an overloaded call competes with first
// attempts that have not failed yet, and shedding it first stops a retry
// storm (gRFC A6: a client retries what a server refused, so an
// overloaded server that sheds first attempts and retries alike is sent
// more of both).
//
// A request is a retry when it carries grpc-previous-rpc-attempts above
// 0 (every gRPC client that retries by gRFC A6 sends it), or, with
// AttemptHeader, that header with an attempt number above 1. A retry of
// priority p is shed from Margin x capacity below p's threshold, so the
// order in which traffic is shed is: test retries, test, read retries,
// read, write retries, write; critical traffic, retried or not, is never
// shed. A value that is not a whole number is no retry.
type Retries struct {
	// Margin is the share of capacity below its priority's threshold from
	// which a retry is shed; 0 means DefaultRetryMargin. It must lie in
	// (0, 0.5), and a threshold minus it must stay above 0.
	Margin float64
	// AttemptHeader names a request header (HTTP) or metadata key (gRPC),
	// lower-case, whose value is the call's attempt number, 1 for a first
	// attempt, as a proxy in front sets it (Envoy's
	// x-envoy-attempt-count, with include_request_attempt_count). ""
	// reads grpc-previous-rpc-attempts alone. A header is whatever the
	// client sent unless the proxy sets it and strips the client's.
	AttemptHeader string
}

// WithRetries sheds retries before first attempts of the same priority
// (see Retries; off by default). The transport (package interceptor)
// copies the headers it names into each Request: a Shedder offers them
// with RequestHeaders. A retry shed has the Policy of the Shedder's other
// sheds with RetriesPolicySuffix after it ("shedder.retries" by default),
// so that telemetry and the client tell it apart.
func WithRetries(r Retries) Option {
	return func(c *config) { c.retries = &r } // checked by New, against the thresholds
}

func (r Retries) margin() float64 {
	if r.Margin == 0 {
		return DefaultRetryMargin
	}
	return r.Margin
}

// check reports what is wrong with r under thresholds t, each a field
// error.
func (r Retries) check(t [floodgate.NumPriorities]float64) []*field.Error {
	var errs []*field.Error
	m := r.margin()
	switch {
	case math.IsNaN(m) || m <= 0 || m >= 0.5:
		errs = append(errs, field.Errorf("margin", "%v is out of range (0, 0.5)", r.Margin))
	case t[floodgate.PriorityTest]-m <= 0:
		errs = append(errs, field.Errorf("margin", "%v leaves no room below the test threshold %v: retries of test traffic would always be shed", m, t[floodgate.PriorityTest]))
	}
	h := r.AttemptHeader
	switch {
	case h == "":
	case h != strings.ToLower(h) || strings.ContainsAny(h, " \t:\r\n"):
		errs = append(errs, field.Errorf("attempt_header", "%q is not a lower-case header name", h))
	case h == grpcAttempts:
		errs = append(errs, field.Errorf("attempt_header", "%q is read anyway, and counts previous attempts, not the attempt", h))
	}
	return errs
}

// retrySet is a Shedder's retry settings in force.
type retrySet struct {
	margin  float64
	attempt string   // AttemptHeader
	headers []string // what RequestHeaders reports
}

func newRetrySet(r *Retries) *retrySet {
	if r == nil {
		return nil
	}
	rs := &retrySet{margin: r.margin(), attempt: r.AttemptHeader, headers: []string{grpcAttempts}}
	if r.AttemptHeader != "" {
		rs.headers = append(rs.headers, r.AttemptHeader)
	}
	return rs
}

// isRetry reports whether r is a retry (see Retries).
func (rs *retrySet) isRetry(r *floodgate.Request) bool {
	if len(r.Headers) == 0 {
		return false
	}
	if n, err := strconv.ParseUint(r.Header(grpcAttempts), 10, 32); err == nil && n > 0 {
		return true
	}
	if rs.attempt != "" {
		if n, err := strconv.ParseUint(r.Header(rs.attempt), 10, 32); err == nil && n > 1 {
			return true
		}
	}
	return false
}

// RequestHeaders names the request headers a Shedder reads: with
// WithRetries (or a Config's Retries), the ones that tell a retry; none
// otherwise. The transport (package interceptor) copies them into each
// Request; the slice is the same until a Reconfigure changes it.
func (s *Shedder) RequestHeaders() []string {
	if rs := s.retries.Load(); rs != nil {
		return rs.headers
	}
	return nil
}

// retriesErrors reports what is wrong with a Config's Retries under its
// thresholds.
func retriesErrors(c Config) []*field.Error {
	if c.Retries == nil {
		return nil
	}
	t := c.Thresholds.orDefault()
	var th [floodgate.NumPriorities]float64
	th[floodgate.PriorityTest], th[floodgate.PriorityRead], th[floodgate.PriorityWrite] = t.Test, t.Read, t.Write
	errs := c.Retries.check(th)
	for i, e := range errs {
		errs[i] = e.Under("retries")
	}
	return errs
}
