package tiers

import (
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
)

// A rule keyed on a scope that a request lacks does not apply to that
// request (Decision.Skipped names it). That is how keyed rules work for
// some requests (anonymous callers of a per-user rule), but a rule whose
// scope the transport never fills applies to no request at all: a silent
// hole in the policy. RequireScopes lets a transport say what it can fill,
// so such a rule is reported when the policy is set, not discovered in
// production.

// Transports of RequireScopes.
const (
	TransportGRPC = "grpc"
	TransportHTTP = "http"
)

// scopeDecl is one RequireScopes declaration.
type scopeDecl struct {
	transport  string
	resolvable uint8 // bit s set: scope s is filled
	strict     bool
	warned     map[string]bool // rule name + "\x00" + scope: logged already
}

// RequireScopes declares which key scopes a transport fills, so that a
// rule keyed on a scope it never fills is reported instead of being
// skipped on every request without a word. Package interceptor calls it
// for every Limiter it wraps; a transport of one's own may too.
//
// transport is TransportGRPC, TransportHTTP or "" (both): a rule whose
// match names only the other transport's calls is not checked (gRPC
// methods start with '/', HTTP routes with a verb or '*'). resolvable
// names the scopes the transport fills: endpoint, user, api_key, ip,
// tenant, and header when it copies the headers the policy names
// (RequestHeaders) into Request.Headers: a rule keyed on a header scope,
// or matching on a header, needs it.
//
// Every rule of the policy in force, and of every policy later swapped in,
// that the transport may see and whose key needs a scope outside
// resolvable is logged as a warning through log/slog once per rule and
// scope. When strict, such a rule is an error instead: RequireScopes
// returns it and declares nothing, and a later SetPolicy (or Watch reload)
// with such a rule fails, leaving the policy in force. Declaring the same
// thing twice is a no-op. Unknown transports and scope names are errors.
func (l *Limiter) RequireScopes(transport string, resolvable []string, strict bool) error {
	if transport != "" && transport != TransportGRPC && transport != TransportHTTP {
		return fmt.Errorf("tiers: RequireScopes: unknown transport %q (want %q, %q or \"\")", transport, TransportGRPC, TransportHTTP)
	}
	d := &scopeDecl{transport: transport, strict: strict}
	for _, name := range resolvable {
		s, err := parseScope(name)
		if err != nil {
			return fmt.Errorf("tiers: RequireScopes: %w", err)
		}
		d.resolvable |= 1 << s
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, have := range l.scopes {
		if have.transport == d.transport && have.resolvable == d.resolvable && have.strict == d.strict {
			return nil
		}
	}
	if err := d.check(l.state.Load()); err != nil {
		return err
	}
	l.scopes = append(l.scopes, d)
	return nil
}

// checkScopes checks c against every declaration; l.mu is held.
func (l *Limiter) checkScopes(c *compiled) error {
	var errs []error
	for _, d := range l.scopes {
		if err := d.check(c); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// check reports (strict) or logs the rules of c whose key d can never
// fill.
func (d *scopeDecl) check(c *compiled) error {
	var errs []error
	for i := range c.rules {
		cr := &c.rules[i]
		if !d.sees(cr) {
			continue
		}
		need := cr.key
		if cr.missing != missingDefault {
			need = nil // when_missing: the rule says what such requests get
		}
		if cr.cond != nil && len(cr.cond.headers) > 0 && !slices.Contains(need, ScopeHeader) {
			// A header match needs the headers as a header scope does.
			need = append(slices.Clone(need), ScopeHeader)
		}
		for _, s := range need {
			if d.resolvable&(1<<s) != 0 {
				continue
			}
			if d.strict {
				hint := scopeHint(s)
				if slices.Contains(cr.key, s) {
					hint += ", or say when_missing: skip or deny on the rule"
				}
				errs = append(errs, fmt.Errorf("tiers: rule %q (%s) is keyed on %s, which the %s transport never fills (%s): it would apply to no request",
					cr.name, cr.where(), s, d.name(), hint))
				continue
			}
			k := cr.name + "\x00" + s.String()
			if d.warned[k] {
				continue
			}
			if d.warned == nil {
				d.warned = make(map[string]bool)
			}
			d.warned[k] = true
			slog.Warn("floodgate: rule is keyed on a scope the transport never fills, so it applies to no request (each decision names it in Decision.Skipped)",
				"rule", cr.name, "scope", s.String(), "transport", d.name(), "fix", scopeHint(s))
		}
	}
	return errors.Join(errs...)
}

func (d *scopeDecl) name() string {
	if d.transport == "" {
		return "grpc and http"
	}
	return d.transport
}

// sees reports whether the transport may send requests that r matches.
func (d *scopeDecl) sees(r *cRule) bool {
	if r.any || d.transport == "" {
		return true
	}
	p := r.exact
	if p == "" {
		p = r.glob
	}
	grpcMethod := strings.HasPrefix(p, "/")
	return grpcMethod == (d.transport == TransportGRPC)
}

// where names the rule's place in the policy: its index and, when it was
// loaded from YAML, its line.
func (cr *cRule) where() string {
	if cr.line > 0 {
		return fmt.Sprintf("rules[%d], line %d", cr.index, cr.line)
	}
	return fmt.Sprintf("rules[%d]", cr.index)
}

func scopeHint(s Scope) string {
	switch s {
	case ScopeUser:
		return "give it a source: the policy file's identity: user:, or interceptor.WithUser"
	case ScopeTenant:
		return "give it a source: the policy file's identity: tenant:, or interceptor.WithTenant"
	case ScopeAPIKey:
		return "give it a source: the policy file's identity: api_key:, or interceptor.WithAPIKey"
	case ScopeIP:
		return "the transport has no client address"
	case ScopeHeader:
		return "the transport does not copy the policy's headers (Limiter.RequestHeaders) into Request.Headers"
	}
	return "the transport names no method"
}
