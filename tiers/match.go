package tiers

import (
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/internal/syntax"
)

// Matches beyond the method (Match.Header, Match.Tier) and header key
// scopes (ScopeHeader). The transport copies the headers a policy names
// into Request.Headers; the policy in force says which (Limiter.RequestHeaders).

// maxHeaderName is the longest header name a policy may match or key on.
const maxHeaderName = 64

// reservedHeaders are header names a policy may not match or key on, with
// what to use instead: credentials belong in api_key (always hashed), the
// client address in ip (resolved through trusted proxies only).
var reservedHeaders = map[string]string{
	"authorization":       "it carries credentials: key on api_key (interceptor.WithAPIKey), which is always hashed",
	"proxy-authorization": "it carries credentials: key on api_key (interceptor.WithAPIKey), which is always hashed",
	"cookie":              "it carries credentials: key on user, tenant or api_key from a verified source",
	"forwarded":           "a client forges it: key on ip, which is read from forwarding headers of trusted proxies only",
	"x-forwarded-for":     "a client forges it: key on ip, which is read from forwarding headers of trusted proxies only",
	"x-real-ip":           "a client forges it: key on ip, which is read from forwarding headers of trusted proxies only",
	"host":                "net/http moves it out of the headers (http.Request.Host) and gRPC calls it :authority",
}

// headerName checks a header name of a policy and returns it lower-cased.
func headerName(s string) (string, error) {
	if s == "" {
		return "", fmt.Errorf("header name must not be empty")
	}
	if len(s) > maxHeaderName {
		return "", fmt.Errorf("header name %.20q... is longer than %d bytes", s, maxHeaderName)
	}
	for i := 0; i < len(s); i++ {
		if !unreservedTab[s[i]] {
			return "", fmt.Errorf("header name %q must match [A-Za-z0-9_.-]+", s)
		}
	}
	n := strings.ToLower(s)
	if why, bad := reservedHeaders[n]; bad {
		return "", fmt.Errorf("header %q cannot be matched or keyed on: %s", n, why)
	}
	if strings.HasSuffix(n, "-bin") {
		return "", fmt.Errorf("header %q is binary gRPC metadata; only text headers can be matched or keyed on", n)
	}
	return n, nil
}

// cond is what a rule matches beyond its method; nil when nothing.
type cond struct {
	headers []headerCond // by name
	tiers   []string     // sorted; nil: any tier
}

type headerCond struct {
	name   string
	values []string
}

// applies reports whether r is a request rule cr applies to: its method,
// headers and tier match.
func (cr *cRule) applies(c *compiled, r *floodgate.Request) bool {
	return cr.matches(r.Method) && (cr.cond == nil || cr.cond.match(c, r))
}

// match reports whether r's headers and tier match.
func (cd *cond) match(c *compiled, r *floodgate.Request) bool {
	for i := range cd.headers {
		h := &cd.headers[i]
		v := r.Header(h.name)
		if v == "" || !slices.Contains(h.values, v) {
			return false
		}
	}
	if cd.tiers != nil {
		t := r.Tier
		if _, ok := c.tiers[t]; !ok {
			t = c.policy.DefaultTier
		}
		if _, ok := slices.BinarySearch(cd.tiers, t); !ok {
			return false
		}
	}
	return true
}

// compileCond checks a rule's header and tier matches and builds its cond
// (nil when it has none). names collects the header names the policy
// needs.
func compileCond(rep *reporter, rp string, m *Match, p *Policy, names map[string]struct{}) (*cond, bool) {
	if len(m.Header) == 0 && m.Tier == nil {
		return nil, true
	}
	ok := true
	c := &cond{}
	hnames := make([]string, 0, len(m.Header))
	for n := range m.Header {
		hnames = append(hnames, n)
	}
	sort.Strings(hnames)
	seen := make(map[string]string, len(hnames))
	for _, raw := range hnames {
		hp := rp + ".match.header." + raw
		if !syntax.Name(raw) {
			hp = rp + ".match.header[" + strconv.Quote(raw) + "]"
		}
		n, err := headerName(raw)
		if err != nil {
			rep.add(hp, err.Error())
			ok = false
			continue
		}
		if first, dup := seen[n]; dup {
			rep.addf(hp, "header %q is already matched as %q (names are case-insensitive)", n, first)
			ok = false
			continue
		}
		seen[n] = raw
		vals := m.Header[raw]
		if len(vals) == 0 {
			rep.add(hp, "list at least one value (a request matches when it sent one of them)")
			ok = false
			continue
		}
		for j, v := range vals {
			if v == "" {
				rep.addf(hp+"["+strconv.Itoa(j)+"]", "an empty value never matches (a request without the header has no value)")
				ok = false
			}
		}
		c.headers = append(c.headers, headerCond{name: n, values: slices.Clone(vals)})
		names[n] = struct{}{}
	}
	if m.Tier != nil {
		if len(m.Tier) == 0 {
			rep.add(rp+".match.tier", "list at least one tier (omit tier to match every tier)")
			ok = false
		}
		for j, t := range m.Tier {
			if _, declared := p.Tiers[t]; !declared {
				rep.addf(rp+".match.tier["+strconv.Itoa(j)+"]", "%q is not one of the tiers", t)
				ok = false
			}
		}
		c.tiers = slices.Clone(m.Tier)
		slices.Sort(c.tiers)
		c.tiers = slices.Compact(c.tiers)
	}
	return c, ok
}

// headerValue returns the request's value for the header of key scope j
// of rule r.
func (r *cRule) headerValue(j int, req *floodgate.Request) (string, bool) {
	v := req.Header(r.keyHeaders[j])
	return v, v != ""
}

// RequestHeaders returns the lower-case names of the headers (gRPC
// metadata keys) the policy in force matches or keys on, sorted: what a
// transport must copy into Request.Headers, and all it needs to. The
// slice is shared and must not be modified. Package interceptor finds
// this method on the stages it wraps and reads it on every call, so a
// reload that names a new header applies at once.
func (l *Limiter) RequestHeaders() []string { return l.state.Load().headers }

// keyHeaders checks the header scopes of rule r (Rule.KeyHeaders against
// the ScopeHeader entries of Rule.Key) and records their names in cr.
func keyHeaders(rep *reporter, rp string, r *Rule, cr *cRule, names map[string]struct{}) bool {
	n := 0
	for _, s := range r.Key {
		if s == ScopeHeader {
			n++
		}
	}
	if n != len(r.KeyHeaders) {
		rep.addf(rp+".key", "has %d header scopes but KeyHeaders names %d headers: name one per header scope, in key order", n, len(r.KeyHeaders))
		return false
	}
	if n == 0 {
		return true
	}
	ok := true
	cr.keyHeaders = make([]string, len(r.Key))
	k := 0
	for j, s := range r.Key {
		if s != ScopeHeader {
			continue
		}
		sp := rp + ".key[" + strconv.Itoa(j) + "]"
		name, err := headerName(r.KeyHeaders[k])
		k++
		if err != nil {
			rep.add(sp, err.Error())
			ok = false
			continue
		}
		if slices.Contains(cr.keyHeaders, name) {
			rep.addf(sp, "scope %q is repeated (header names are case-insensitive)", "header:"+name)
			ok = false
			continue
		}
		cr.keyHeaders[j] = name
		names[name] = struct{}{}
	}
	return ok
}

// overrideHeaders lower-cases and checks the header names of an
// override's key; the message is non-empty on error.
func overrideHeaders(m map[string]string) (map[string]string, string) {
	if len(m) == 0 {
		return nil, ""
	}
	out := make(map[string]string, len(m))
	raws := make([]string, 0, len(m))
	for raw := range m {
		raws = append(raws, raw)
	}
	sort.Strings(raws)
	for _, raw := range raws {
		n, err := headerName(raw)
		if err != nil {
			return nil, err.Error()
		}
		if _, dup := out[n]; dup {
			return nil, fmt.Sprintf("header %q is named twice (header names are case-insensitive)", n)
		}
		out[n] = m[raw]
	}
	return out, ""
}

// sameHeaders reports whether an override's headers are exactly the
// header scopes of a rule's key.
func sameHeaders(keyHeaders []string, oh map[string]string) bool {
	n := 0
	for _, h := range keyHeaders {
		if h == "" {
			continue
		}
		if _, ok := oh[h]; !ok {
			return false
		}
		n++
	}
	return n == len(oh)
}

// keyList is r's key as written in YAML: "tenant, header:x-region".
func (r *cRule) keyList() string {
	parts := make([]string, len(r.key))
	for j, s := range r.key {
		parts[j] = s.String()
		if s == ScopeHeader {
			parts[j] = "header:" + r.keyHeaders[j]
		}
	}
	return strings.Join(parts, ", ")
}

// overrideKeyList is an override's key scopes as written in YAML, sorted.
func overrideKeyList(key map[Scope]string, headers map[string]string) string {
	parts := make([]string, 0, len(key)+len(headers))
	for _, s := range keysOf(key) {
		parts = append(parts, s.String())
	}
	hs := make([]string, 0, len(headers))
	for h := range headers {
		hs = append(hs, "header:"+h)
	}
	sort.Strings(hs)
	return strings.Join(append(parts, hs...), ", ")
}
