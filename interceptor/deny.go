package interceptor

import (
	"context"
	"mime"
	"net/http"
	"strconv"
	"strings"

	"google.golang.org/grpc/status"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/internal/seam"
)

// DenyResponse answers denials in an API's own error format
// (WithDenyResponse), as ulule/limiter's LimitReachedHandler or Kong's
// error_code and error_message do. It replaces only the HTTP status and
// body of a denial and the message of its gRPC status: an HTTP denial
// keeps Retry-After, RateLimit-Policy, RateLimit (and the X-RateLimit-*
// fields of WithLegacyHeaders) and Cache-Control: no-store; a gRPC denial
// keeps its code, its ErrorInfo, RetryInfo and QuotaFailure details and
// the grpc-retry-pushback-ms trailer. The zero value of each field keeps
// the standard answer for that part.
type DenyResponse struct {
	// Status is the HTTP status of every denial, 400 to 599. 0 keeps each
	// stage's own: 429, or 503 for the shedder.
	Status int
	// ContentType is the Content-Type of Body's bodies; "" means
	// "application/json". It needs a Body.
	ContentType string
	// Body returns the HTTP body of the denial d. ctx is the request's
	// context: floodgate.FromContext finds the Request, and whatever
	// earlier middleware stored there (a request ID) is there. nil keeps
	// the application/problem+json body; a nil or empty result sends no
	// body. d is the whole Decision: a body that names the policy, limit
	// or remaining units leaves them out when d.HideQuota is set, as the
	// standard answers do.
	Body func(ctx context.Context, d floodgate.Decision) []byte
	// Message returns the message of a gRPC denial's status (also that of
	// connectmw's Connect errors) for the denial d of the call of ctx. nil
	// keeps the standard message, such as `rate limit exceeded (policy
	// "per-user"); retry after 2s`. As for Body, mind d.HideQuota.
	Message func(ctx context.Context, d floodgate.Decision) string
}

// WithDenyResponse writes every denial of the Interceptor's HTTP
// middleware and gRPC interceptors with r: see DenyResponse for what it
// replaces and what every denial keeps. A DenyResponse that sets nothing,
// a Status outside 400-599, or a ContentType that is no media type or
// comes without a Body, is an error of New.
func WithDenyResponse(r DenyResponse) Option {
	return func(c *config) {
		bad := false
		if r.Status == 0 && r.Body == nil && r.Message == nil {
			c.fail("WithDenyResponse: sets nothing: give a Status, a Body or a Message")
			bad = true
		}
		if r.Status != 0 && (r.Status < 400 || r.Status > 599) {
			c.fail("WithDenyResponse: Status %d is not a 4xx or 5xx status", r.Status)
			bad = true
		}
		if r.ContentType != "" {
			if r.Body == nil {
				c.fail("WithDenyResponse: ContentType %q without a Body", r.ContentType)
				bad = true
			} else if mt, _, err := mime.ParseMediaType(r.ContentType); err != nil || !strings.Contains(mt, "/") {
				c.fail("WithDenyResponse: ContentType %q is not a media type (type/subtype)", r.ContentType)
				bad = true
			}
		}
		if bad {
			return
		}
		if r.ContentType == "" {
			r.ContentType = "application/json"
		}
		c.deny = &r
	}
}

// denial builds the seam.Denial of d, denied on the call of ctx: what
// UnaryServer and HTTP send for the same Decision, for an adapter of
// another transport (connectmw) to send.
func (i *Interceptor) denial(ctx context.Context, d floodgate.Decision) *seam.Denial {
	h := make(http.Header, 4)
	i.denyHeaders(h, d)
	return &seam.Denial{Status: i.denyStatus(ctx, d), Header: h, Pushback: pushbackValue(d.RetryAfter)}
}

// denyStatus is DenyStatus with the message of WithDenyResponse, if any.
func (i *Interceptor) denyStatus(ctx context.Context, d floodgate.Decision) *status.Status {
	st := DenyStatus(d, i.c.domain)
	if i.c.deny == nil || i.c.deny.Message == nil {
		return st
	}
	p := st.Proto() // a copy
	p.Message = i.c.deny.Message(ctx, d)
	return status.FromProto(p)
}

// denyHeaders adds the HTTP fields every denial carries, whatever writes
// its body: Retry-After (never earlier than a RateLimit t), the quota
// fields and Cache-Control: no-store. It returns the Retry-After seconds
// (0 when the decision gave no RetryAfter).
func (i *Interceptor) denyHeaders(h http.Header, d floodgate.Decision) int64 {
	var ra int64
	if d.RetryAfter > 0 {
		ra = max(ceilSeconds(d.RetryAfter), quotaSeconds(d))
		h["Retry-After"] = []string{strconv.FormatInt(ra, 10)}
	}
	i.quotaHeaders(h, d)
	h["Cache-Control"] = []string{"no-store"}
	return ra
}

// writeCustomDeny writes a denial with WithDenyResponse's status and
// body; the fields of denyHeaders are already set.
func (i *Interceptor) writeCustomDeny(w http.ResponseWriter, r *http.Request, d floodgate.Decision) {
	code := i.c.deny.Status
	if code == 0 {
		code = d.Stage.Semantics().HTTPStatus
	}
	var body []byte
	if i.c.deny.Body != nil {
		body = i.c.deny.Body(r.Context(), d)
	}
	h := w.Header()
	if len(body) > 0 {
		h["Content-Type"] = []string{i.c.deny.ContentType}
	}
	h["Content-Length"] = []string{strconv.Itoa(len(body))}
	if sw, ok := w.(*statusWriter); ok {
		sw.denied = true // an earlier stage's middleware: see laterDenied
	}
	w.WriteHeader(code)
	if len(body) > 0 {
		_, _ = w.Write(body)
	}
}
