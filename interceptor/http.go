package interceptor

import (
	"encoding/json"
	"net/http"
	"strconv"
	"unsafe"

	"github.com/floodgate-go/floodgate"
)

// route names r: by the pattern of WithServeMux's mux first (an outer
// router's r.Pattern, "/" for a mux mounted under it, names the outer
// route, never the one the policy's rules are written for), then
// r.Pattern, WithRoute.
func (i *Interceptor) route(r *http.Request) string {
	if i.c.mux != nil {
		if _, p := i.c.mux.Handler(r); p != "" {
			return p
		}
	}
	if r.Pattern != "" {
		return r.Pattern
	}
	if i.c.route != nil {
		if p := i.c.route(r); p != "" {
			return p
		}
	}
	logThrottled(&i.logs.route, "floodgate: HTTP request without a route pattern; limiting it with an empty method (wrap handlers inside the mux, or use WithServeMux/WithRoute)")
	return ""
}

func httpPriority(method string) floodgate.Priority {
	switch method {
	case http.MethodGet, http.MethodHead, http.MethodOptions, http.MethodTrace:
		return floodgate.PriorityRead
	}
	return floodgate.PriorityWrite
}

// HTTP returns net/http middleware admitting requests through a: one
// stage, or a floodgate.Chain. Use one per stage or one around a Chain. It
// panics if a is nil, and with WithStrictIdentity if a rule of a stage's
// policy can never apply.
//
// The request's Method is its route pattern: r.Pattern, which
// http.ServeMux sets only once it has routed the request. Wrap the
// handlers registered on the mux (mux.Handle("GET /v1/items/{id}",
// mw(h))) and r.Pattern is there. Middleware wrapping the whole mux sees an
// empty r.Pattern, and middleware mounted under an outer router sees the
// outer route's ("/" for top.Handle("/", mw(mux))): give it
// WithServeMux(mux), whose pattern then wins over r.Pattern, or WithRoute
// (which can name requests "METHOD /path", but only when asked, since raw
// paths are unbounded). With neither, an unrouted request has an empty
// Method (rules keyed on method do not match it) and a warning is logged,
// rate-limited.
func (i *Interceptor) HTTP(a floodgate.Admitter) func(http.Handler) http.Handler {
	i.requireScopes(a, transportHTTP)
	a = i.stage(a)
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if i.c.healthPaths[r.URL.Path] {
				next.ServeHTTP(w, r)
				return
			}
			cl := call{def: httpPriority(r.Method), md: Metadata{h: r.Header, req: r}, remoteAddr: r.RemoteAddr}
			if fr, ok := floodgate.FromContext(r.Context()); ok {
				cl.method = fr.Method
			} else {
				cl.method = i.route(r)
			}
			if i.c.skip != nil && i.c.skip(cl.method) {
				next.ServeHTTP(w, r)
				return
			}
			r, done, ok := i.gateHTTP(a, w, r, &cl)
			if !ok {
				return
			}
			if done == nil {
				next.ServeHTTP(w, r)
				return
			}
			sw := &statusWriter{ResponseWriter: w}
			var (
				ran     bool
				outcome floodgate.Outcome
			)
			defer finish(done, r.Context(), &ran, &outcome)
			next.ServeHTTP(sw, r)
			ran, outcome = true, httpOutcome(sw.code, r.Context())
			if sw.denied {
				outcome = laterDenied
			}
		})
	}
}

// gateHTTP admits an HTTP request: the request the handler gets (with the
// context carrying the floodgate.Request), the stage's Done and true; or,
// on a denial, false once the deny response is written. Never inlined, so
// that the admission's locals are off the stack while the handler runs
// (see gateUnary).
//
//go:noinline
func (i *Interceptor) gateHTTP(a floodgate.Admitter, w http.ResponseWriter, r *http.Request, cl *call) (*http.Request, floodgate.Done, bool) {
	fr, nctx := i.request(r.Context(), cl)
	if nctx != r.Context() {
		r = r.WithContext(nctx)
	}
	d, done := i.admit(a, r.Context(), fr)
	if !d.Allowed {
		i.writeDeny(w, r, d)
		return r, nil, false
	}
	i.quotaHeaders(w.Header(), d)
	waitHeader(w, d) // max_wait: Server-Timing
	if d.SoftExceeded != "" {
		softHTTP(w, fr, d)
	}
	return r, done, true
}

// quotaSeconds is the t of the RateLimit field: on a deny the seconds
// until the request could pass (RetryAfter, rounded up), otherwise until
// the quota is fully restored (Reset, rounded up).
func quotaSeconds(d floodgate.Decision) int64 {
	if !d.Allowed && d.RetryAfter > 0 {
		return ceilSeconds(d.RetryAfter)
	}
	return ceilSeconds(d.Reset)
}

// quotaHeaders adds the RateLimit-Policy and RateLimit fields (and the
// legacy X-RateLimit-* fields when enabled) for a rate-limit decision: one
// naming a policy with a positive Limit and Window that does not hide its
// quota, and is not a shadow (dry-run) decision. A decision with several
// windows (Decision.Quotas) lists every one of them, the binding first.
func (i *Interceptor) quotaHeaders(h http.Header, d floodgate.Decision) {
	if d.HideQuota || d.Shadow || d.Policy == "" || d.Limit <= 0 || d.Window <= 0 {
		return
	}
	t := quotaSeconds(d)
	remaining := max(d.Remaining, 0)
	if qs := d.Quotas(); len(qs) > 1 {
		i.quotaList(h, qs)
	} else if validSFString(d.Policy) {
		buf := make([]byte, 0, 2*len(d.Policy)+96)
		buf = appendSFString(buf, d.Policy)
		buf = append(buf, ";q="...)
		buf = strconv.AppendInt(buf, d.Limit, 10)
		buf = append(buf, ";w="...)
		buf = strconv.AppendInt(buf, ceilSeconds(d.Window), 10)
		policy := len(buf)
		buf = appendSFString(buf, d.Policy)
		buf = append(buf, ";r="...)
		buf = strconv.AppendInt(buf, remaining, 10)
		buf = append(buf, ";t="...)
		buf = strconv.AppendInt(buf, t, 10)
		// buf is never written again, so it can back the string.
		s := unsafe.String(unsafe.SliceData(buf), len(buf))
		pol, rl := h["Ratelimit-Policy"], h["Ratelimit"]
		if pol == nil && rl == nil {
			// One backing array for both fields; capacities are capped so
			// a later Add copies instead of overwriting the other field.
			vals := [2]string{s[:policy], s[policy:]}
			h["Ratelimit-Policy"], h["Ratelimit"] = vals[0:1:1], vals[1:2:2]
		} else {
			h["Ratelimit-Policy"] = append(pol, s[:policy])
			h["Ratelimit"] = append(rl, s[policy:])
		}
	} else {
		logThrottled(&i.logs.sf, "floodgate: policy name cannot be sent as a Structured Field string (non-ASCII or control characters); RateLimit fields omitted")
	}
	if i.c.legacyHeaders {
		h["X-Ratelimit-Limit"] = []string{strconv.FormatInt(d.Limit, 10)}
		h["X-Ratelimit-Remaining"] = []string{strconv.FormatInt(remaining, 10)}
		h["X-Ratelimit-Reset"] = []string{strconv.FormatInt(i.c.clock.Now().Unix()+t, 10)}
	}
}

// quotaList adds the RateLimit-Policy and RateLimit fields listing every
// window of qs (Decision.Quotas), in order, as one List each:
//
//	RateLimit-Policy: "plan/1m";q=10;w=60, "plan/1d";q=1000;w=86400
//	RateLimit: "plan/1m";r=0;t=5, "plan/1d";r=990;t=86000
//
// t is RetryAfter for a violated window and Reset for the others. Windows
// without a positive limit and window, or whose name cannot be a String,
// are left out (the latter logged).
func (i *Interceptor) quotaList(h http.Header, qs []floodgate.Quota) {
	n := 0
	for _, q := range qs {
		n += 2*len(q.Policy) + 96
	}
	buf := make([]byte, 0, n)
	rl := make([]byte, 0, n/2)
	for _, q := range qs {
		if q.Limit <= 0 || q.Window <= 0 {
			continue
		}
		if !validSFString(q.Policy) {
			logThrottled(&i.logs.sf, "floodgate: policy name cannot be sent as a Structured Field string (non-ASCII or control characters); RateLimit fields omitted")
			continue
		}
		if len(rl) > 0 {
			buf = append(buf, ", "...)
			rl = append(rl, ", "...)
		}
		buf = appendSFString(buf, q.Policy)
		buf = append(buf, ";q="...)
		buf = strconv.AppendInt(buf, q.Limit, 10)
		buf = append(buf, ";w="...)
		buf = strconv.AppendInt(buf, ceilSeconds(q.Window), 10)
		t := ceilSeconds(q.Reset)
		if q.Violated && q.RetryAfter > 0 {
			t = ceilSeconds(q.RetryAfter)
		}
		rl = appendSFString(rl, q.Policy)
		rl = append(rl, ";r="...)
		rl = strconv.AppendInt(rl, max(q.Remaining, 0), 10)
		rl = append(rl, ";t="...)
		rl = strconv.AppendInt(rl, t, 10)
	}
	if len(rl) == 0 {
		return
	}
	h["Ratelimit-Policy"] = append(h["Ratelimit-Policy"], string(buf))
	h["Ratelimit"] = append(h["Ratelimit"], string(rl))
}

// violated names the windows a denying decision violated: those of
// Quotas marked Violated, or the binding policy alone.
func violated(d floodgate.Decision) []string {
	qs := d.Quotas()
	if len(qs) < 2 {
		return []string{d.Policy}
	}
	out := make([]string, 0, len(qs))
	for _, q := range qs {
		if q.Violated {
			out = append(out, q.Policy)
		}
	}
	if len(out) == 0 {
		out = append(out, d.Policy)
	}
	return out
}

// validSFString reports whether s can be an RFC 9651 String: printable
// ASCII only.
func validSFString(s string) bool {
	for j := 0; j < len(s); j++ {
		if c := s[j]; c < 0x20 || c > 0x7e {
			return false
		}
	}
	return true
}

// appendSFString appends s (valid per validSFString) as an RFC 9651
// String: in double quotes, with \ and " escaped by a backslash.
func appendSFString(b []byte, s string) []byte {
	b = append(b, '"')
	for j := 0; j < len(s); j++ {
		if s[j] == '"' || s[j] == '\\' {
			b = append(b, '\\')
		}
		b = append(b, s[j])
	}
	return append(b, '"')
}

// sfString is appendSFString to a new string; ok is false when s cannot
// be a String.
func sfString(s string) (string, bool) {
	if !validSFString(s) {
		return "", false
	}
	return string(appendSFString(nil, s)), true
}

type problem struct {
	Type             string   `json:"type"`
	Title            string   `json:"title"`
	Status           int      `json:"status"`
	Detail           string   `json:"detail"`
	ViolatedPolicies []string `json:"violated-policies,omitempty"`
}

// writeDeny writes the response of a denying Decision: the status,
// problem type, title and detail of its stage's floodgate.Semantics (429
// or 503), or what WithDenyResponse says.
func (i *Interceptor) writeDeny(w http.ResponseWriter, r *http.Request, d floodgate.Decision) {
	h := w.Header()
	ra := i.denyHeaders(h, d)
	if i.c.deny != nil && i.c.deny.Body != nil {
		i.writeCustomDeny(w, r, d)
		return
	}
	sem := d.Stage.Semantics()
	p := problem{Type: sem.ProblemType, Title: sem.ProblemTitle, Status: sem.HTTPStatus, Detail: sem.Message}
	if i.c.deny != nil && i.c.deny.Status != 0 {
		p.Status = i.c.deny.Status
	}
	if ra > 0 {
		unit := " seconds"
		if ra == 1 {
			unit = " second"
		}
		p.Detail += "; retry after " + strconv.FormatInt(ra, 10) + unit
	}
	if !d.HideQuota && d.Policy != "" {
		p.ViolatedPolicies = violated(d)
	}
	body, err := json.Marshal(p)
	if err != nil { // cannot happen for this struct; keep the status anyway
		body = nil
	}
	body = append(body, '\n')
	h["Content-Type"] = []string{"application/problem+json"}
	h["Content-Length"] = []string{strconv.Itoa(len(body))}
	if sw, ok := w.(*statusWriter); ok {
		sw.denied = true // an earlier stage's middleware: see laterDenied
	}
	w.WriteHeader(p.Status)
	_, _ = w.Write(body)
}
