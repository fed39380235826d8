package interceptor

import (
	"net/http"

	"github.com/floodgate-go/floodgate"
)

// Request headers a policy asks for. A stage whose rules match or key on
// header (gRPC metadata) values names them (a *tiers.Limiter: its policy's
// match.header and header:<name> key scopes); the interceptor copies the
// first value of each such header present on the call into
// floodgate.Request.Headers, and no other header. The names are read on
// every call, so a policy reload that names a new header applies at once.
//
// The values are what the client sent: unlike the identity extractors
// (WithUser and the others), whose sources the operator chooses, a policy
// header is read from the call as is. It selects or splits a limit; it
// never sets the Identity, and never the client address (the policy may
// not name forwarding or credential headers: package tiers refuses them).

// headerSource is what a stage that matches or keys on request headers
// offers: a *tiers.Limiter names the headers of its policy in force.
type headerSource interface {
	RequestHeaders() []string
}

// headerNames is the names of every header source of an Interceptor as
// last read, with their canonical HTTP forms, rebuilt only when a source's
// names change (a reload), so looking headers up allocates nothing.
type headerNames struct {
	first []*string // the first name of each source's slice, as read
	lens  []int
	lower []string // deduplicated, in source order
	canon []string // http.CanonicalHeaderKey of each
}

func (i *Interceptor) addHeaderSource(src headerSource) {
	for {
		old := i.headers.Load()
		var next []headerSource
		if old != nil {
			for _, have := range *old {
				if have == src {
					return
				}
			}
			next = append(next, *old...)
		}
		next = append(next, src)
		if i.headers.CompareAndSwap(old, &next) {
			return
		}
	}
}

// headerNames returns the header names the stages ask for now, nil when
// none.
func (i *Interceptor) headerNames() *headerNames {
	srcs := i.headers.Load()
	if srcs == nil {
		return nil
	}
	cached := i.hnames.Load()
	if cached != nil && len(cached.first) == len(*srcs) {
		same := true
		for k, s := range *srcs {
			names := s.RequestHeaders()
			if len(names) != cached.lens[k] || len(names) > 0 && &names[0] != cached.first[k] {
				same = false
				break
			}
		}
		if same {
			if len(cached.lower) == 0 {
				return nil
			}
			return cached
		}
	}
	hn := &headerNames{first: make([]*string, len(*srcs)), lens: make([]int, len(*srcs))}
	seen := map[string]bool{}
	for k, s := range *srcs {
		names := s.RequestHeaders()
		hn.lens[k] = len(names)
		if len(names) > 0 {
			hn.first[k] = &names[0]
		}
		for _, n := range names {
			if !seen[n] {
				seen[n] = true
				hn.lower = append(hn.lower, n)
				hn.canon = append(hn.canon, http.CanonicalHeaderKey(n))
			}
		}
	}
	i.hnames.Store(hn)
	if len(hn.lower) == 0 {
		return nil
	}
	return hn
}

// fillHeaders sets r.Headers to the first value of every header the
// stages ask for that the call has (a header sent empty is absent).
func (i *Interceptor) fillHeaders(r *floodgate.Request, md Metadata) {
	hn := i.headerNames()
	if hn == nil {
		return
	}
	for k, name := range hn.lower {
		var v string
		switch {
		case md.h != nil:
			if vs := md.h[hn.canon[k]]; len(vs) > 0 {
				v = vs[0]
			}
		case md.ctx != nil:
			v = firstMD(md.ctx, name)
		}
		if v == "" {
			continue
		}
		if r.Headers == nil {
			r.Headers = make([]floodgate.Header, 0, len(hn.lower)-k)
		}
		r.Headers = append(r.Headers, floodgate.Header{Name: name, Value: v})
	}
}

// asksHeaders reports whether a stage of this Interceptor asks for request
// headers now.
func (i *Interceptor) asksHeaders() bool { return i.headerNames() != nil }
