package guard

import (
	"errors"
	"fmt"
	"maps"
	"path"
	"slices"
	"strings"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"

	"github.com/floodgate-go/floodgate/tiers"
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

// checkLinked checks the policy's gRPC rules against the services linked
// into the binary (every generated service registers its descriptor with
// protoregistry.GlobalFiles when its package is imported): a rule whose
// exact method names a linked service that has no such method is an
// error, a typo found at New without CheckServer. A rule naming a
// service that is not linked (a hand-written ServiceDesc, or a service
// of another binary sharing the policy) is logged at debug level, as is a
// glob that matches no linked method: CheckServer, once the server is
// built, checks them exactly.
func (g *Guard) checkLinked(p *tiers.Policy) error {
	services := map[string]map[string]bool{} // service -> method -> true
	protoregistry.GlobalFiles.RangeFiles(func(fd protoreflect.FileDescriptor) bool {
		for i := range fd.Services().Len() {
			sd := fd.Services().Get(i)
			ms := map[string]bool{}
			for j := range sd.Methods().Len() {
				ms[string(sd.Methods().Get(j).Name())] = true
			}
			services[string(sd.FullName())] = ms
		}
		return true
	})
	var errs []error
	for i, r := range p.Rules {
		m := r.Match.Method
		if !strings.HasPrefix(m, "/") {
			continue
		}
		svc, method, _ := strings.Cut(m[1:], "/")
		if !strings.ContainsAny(m, "*?[\\") {
			switch ms, linked := services[svc]; {
			case linked && !ms[method]:
				errs = append(errs, fmt.Errorf("rule %q (rules[%d]): method %q: service %s has no method %s (it has %s)", r.Name, i, m, svc, method, strings.Join(slices.Sorted(maps.Keys(ms)), ", ")))
			case !linked:
				g.c.logger.Debug("floodgate: a rule names a gRPC service this binary does not link; CheckServer(srv) checks it against the server", "rule", r.Name, "method", m)
			}
			continue
		}
		matched := false
		for s, ms := range services {
			for name := range ms {
				if ok, _ := path.Match(m, "/"+s+"/"+name); ok {
					matched = true
				}
			}
		}
		if !matched {
			g.c.logger.Debug("floodgate: a rule's gRPC method glob matches no method of the services this binary links; CheckServer(srv) checks it against the server", "rule", r.Name, "method", m)
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("guard: policy: %w", errors.Join(errs...))
	}
	return nil
}
