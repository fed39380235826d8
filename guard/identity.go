package guard

import (
	"context"
	"fmt"
	"strings"

	"github.com/floodgate-go/floodgate/interceptor"
	"github.com/floodgate-go/floodgate/policyfile"
)

// WithClaims lets the policy file's claim:NAME identity sources read the
// claims of the token your auth middleware verified: claims returns them
// from the request's context (ok false when it has none). Without it a
// claim source in the file is an error at New; the Guard never reads a
// token itself.
func WithClaims(claims func(ctx context.Context) (map[string]any, bool)) Option {
	return func(c *config) {
		if claims == nil {
			c.fail("WithClaims: nil func")
		}
		c.claims = claims
	}
}

// identityOptions turns the policy file's identity: section into the
// interceptor's options.
func (c *config) identityOptions(id *policyfile.Identity) ([]interceptor.Option, error) {
	if id == nil {
		return nil, nil
	}
	var opts []interceptor.Option
	for _, s := range []struct {
		path string
		src  []string
		with func(interceptor.Extractor) interceptor.Option
	}{
		{"identity.user", id.User, interceptor.WithUser},
		{"identity.tenant", id.Tenant, interceptor.WithTenant},
		{"identity.api_key", id.APIKey, interceptor.WithAPIKey},
		{"identity.tier", id.Tier, interceptor.WithTier},
	} {
		if len(s.src) == 0 {
			continue
		}
		es := make([]interceptor.Extractor, 0, len(s.src))
		for _, src := range s.src {
			kind, name, _ := strings.Cut(src, ":")
			if kind == "header" {
				es = append(es, interceptor.FromHeader(name))
				continue
			}
			if c.claims == nil {
				return nil, fmt.Errorf("guard: policy %s: %s needs WithClaims (the claims of the token your auth middleware verified)", s.path, src)
			}
			es = append(es, interceptor.FromClaims(c.claims, name))
		}
		e := es[0]
		if len(es) > 1 {
			e = interceptor.FirstOf(es...)
		}
		opts = append(opts, s.with(e))
	}
	if len(id.TrustedProxies) > 0 {
		cidrs := make([]string, len(id.TrustedProxies))
		for i, p := range id.TrustedProxies {
			cidrs[i] = p.String()
		}
		opts = append(opts, interceptor.WithTrustedProxies(cidrs...))
		h := interceptor.XForwardedFor
		switch id.ClientIPHeader {
		case "forwarded":
			h = interceptor.Forwarded
		case "x-real-ip":
			h = interceptor.XRealIP
		}
		opts = append(opts, interceptor.WithClientIPHeader(h))
	}
	return opts, nil
}

// chooseTap decides whether ServerOptions sheds in a gRPC tap: not with
// load reports (a tap sends no trailer), nor when the shedder's fairness
// is by an identity the policy reads from a claim (a tap runs before the
// auth middleware). With the tap, the shedder is told which identities
// the tap fills, so a reload cannot make its fairness key on one it does
// not.
func (g *Guard) chooseTap(file *policyfile.File) error {
	g.tap = g.meter == nil
	if !g.tap {
		return nil
	}
	fromClaim := func(sources []string) bool {
		for _, s := range sources {
			if strings.HasPrefix(s, "claim:") {
				return true
			}
		}
		return false
	}
	filled := []string{"endpoint", "ip", "header"}
	id := file.Identity
	if id == nil {
		id = &policyfile.Identity{}
	}
	for _, s := range []struct {
		name    string
		sources []string
	}{{"user", id.User}, {"tenant", id.Tenant}, {"api_key", id.APIKey}} {
		if fromClaim(s.sources) {
			if f := file.Shedder; f != nil && f.Fairness != nil && f.Fairness.By == s.name {
				g.tap = false
				return nil
			}
			continue
		}
		filled = append(filled, s.name)
	}
	if err := g.shedder.RequireScopes("grpc", filled, true); err != nil {
		return fmt.Errorf("guard: policy: %w", err)
	}
	return nil
}
