package guard

import (
	"errors"
	"fmt"
	"path"
	"slices"
	"strings"

	"google.golang.org/grpc"
)

// CheckServer returns an error naming every gRPC method the policy in
// force names and srv does not serve: a rule whose match.method (one
// starting with '/', a glob such as "/shop.v1.Shop/*" included) matches
// no registered method, and a methods: entry for a method srv lacks. A
// typo there would otherwise leave a rule that never applies. Call it
// once the services are registered, before serving; nil means every such
// name matches. srv is a *grpc.Server (or anything that lists services
// as it does).
func (g *Guard) CheckServer(srv interface {
	GetServiceInfo() map[string]grpc.ServiceInfo
}) error {
	var served []string
	for svc, info := range srv.GetServiceInfo() {
		for _, m := range info.Methods {
			served = append(served, "/"+svc+"/"+m.Name)
		}
	}
	slices.Sort(served)
	p := g.limiter.Policy()
	var errs []error
	for i, r := range p.Rules {
		m := r.Match.Method
		if !strings.HasPrefix(m, "/") {
			continue
		}
		if !slices.ContainsFunc(served, func(s string) bool { ok, _ := path.Match(m, s); return ok }) {
			errs = append(errs, fmt.Errorf("rule %q (rules[%d]): method %q matches no method the server registers", r.Name, i, m))
		}
	}
	var methods []string
	for m := range p.Methods {
		if strings.HasPrefix(m, "/") && !slices.Contains(served, m) {
			methods = append(methods, m)
		}
	}
	slices.Sort(methods)
	for _, m := range methods {
		errs = append(errs, fmt.Errorf("methods: %q is not a method the server registers", m))
	}
	if len(errs) > 0 {
		return fmt.Errorf("guard: CheckServer: %w (registered: %s)", errors.Join(errs...), strings.Join(served, ", "))
	}
	return nil
}
