package interceptor

import (
	"errors"
	"fmt"

	"github.com/floodgate-go/floodgate"
)

// Transports named to a stage's scope check (the tiers package's
// TransportGRPC and TransportHTTP).
const (
	transportGRPC = "grpc"
	transportHTTP = "http"
)

// scopeChecker is what a stage that keys on identity offers: a
// *tiers.Limiter warns of (or, strict, refuses) the rules of its policy,
// now and on every reload, whose key needs a scope the transport never
// fills.
type scopeChecker interface {
	RequireScopes(transport string, resolvable []string, strict bool) error
}

// WithStrictIdentity makes a rule that can never apply an error rather
// than a warning: when a stage's policy (a *tiers.Limiter's) has a rule
// keyed on a scope this Interceptor never fills (user without WithUser,
// tenant without WithTenant, api_key without WithAPIKey), UnaryServer,
// StreamServer and HTTP panic naming each such rule, and a later policy
// reload with such a rule fails, leaving the policy in force. Without it,
// each such rule is logged once as a warning. Either way, the decision of
// every request that skips a rule for lack of identity names it in
// floodgate.Decision.Skipped.
func WithStrictIdentity() Option {
	return func(c *config) { c.strictIdentity = true }
}

// resolvable lists the key scopes this Interceptor fills: the method, the
// client address and the headers its stages name (header) always, the
// others when an extractor is configured.
// An extractor that reads the request message (FromProtoField,
// FromMessage) counts although streams never have one: their decisions
// name the rules they skip.
func (c *config) resolvable() []string {
	s := make([]string, 0, 6)
	s = append(s, "endpoint", "ip", "header")
	if c.user != nil {
		s = append(s, "user")
	}
	if c.tenant != nil {
		s = append(s, "tenant")
	}
	if c.apiKey != nil {
		s = append(s, "api_key")
	}
	return s
}

// requireScopes tells every stage of a that checks scopes (found through
// wrappers and Chains with floodgate.All) what this Interceptor fills on
// transport; with WithStrictIdentity a rule that can never apply panics,
// as a bad option does, before anything is served.
func (i *Interceptor) requireScopes(a floodgate.Admitter, transport string) {
	for sc := range floodgate.All[scopeChecker](a) {
		if err := sc.RequireScopes(transport, i.c.resolvable(), i.c.strictIdentity); err != nil {
			panic(fmt.Sprintf("interceptor: WithStrictIdentity: %v", err))
		}
	}
}

// CheckIdentity returns an error naming every rule of a's stages (a
// *tiers.Limiter's policy, through wrappers and Chains) keyed on a scope
// this Interceptor never fills on any transport (user without WithUser,
// tenant without WithTenant, api_key without WithAPIKey), or nil. From
// then on a policy reload that brings such a rule fails, leaving the
// policy in force. It is WithStrictIdentity's check as an error, for a
// constructor that builds the chain (package guard) rather than a panic.
func (i *Interceptor) CheckIdentity(a floodgate.Admitter) error {
	var errs []error
	for sc := range floodgate.All[scopeChecker](a) {
		errs = append(errs, sc.RequireScopes("", i.c.resolvable(), true))
	}
	return errors.Join(errs...)
}
