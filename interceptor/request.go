package interceptor

import (
	"context"
	"log/slog"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/types/descriptorpb"

	"github.com/floodgate-go/floodgate"
	floodgatev1 "github.com/floodgate-go/floodgate/proto/floodgate/v1"
)

// annotationCache holds the (floodgate.v1.method) options of every gRPC
// method looked up so far, as a copy-on-write map: lookups are a plain map
// read (no allocation, no lock), and a miss copies the map under
// annotationMu. Only methods found in the registry are cached, so the cache
// is bounded by the registered services.
var (
	annotationCache atomic.Pointer[map[string]annotation]
	annotationMu    sync.Mutex
)

// LookupAnnotation returns the (floodgate.v1.method) option of a gRPC full
// method ("/pkg.Svc/Method") from the descriptors registered in
// protoregistry.GlobalFiles; ok is false when the method is unknown or not
// annotated. Results are cached.
func LookupAnnotation(fullMethod string) (MethodLimits, bool) {
	if m := annotationCache.Load(); m != nil {
		if a, ok := (*m)[fullMethod]; ok {
			return a.MethodLimits, a.ok
		}
	}
	a, found := readAnnotation(fullMethod)
	if found {
		annotationMu.Lock()
		old := annotationCache.Load()
		var next map[string]annotation
		if old == nil {
			next = make(map[string]annotation, 1)
		} else {
			next = make(map[string]annotation, len(*old)+1)
			for k, v := range *old {
				next[k] = v
			}
		}
		next[fullMethod] = a
		annotationCache.Store(&next)
		annotationMu.Unlock()
	}
	return a.MethodLimits, a.ok
}

type annotation struct {
	MethodLimits
	ok bool
}

// readAnnotation reads a method's option; found says the method exists in
// the registry (annotated or not).
func readAnnotation(fullMethod string) (annotation, bool) {
	if len(fullMethod) < 4 || fullMethod[0] != '/' {
		return annotation{}, false
	}
	slash := strings.LastIndexByte(fullMethod, '/')
	if slash <= 1 {
		return annotation{}, false
	}
	svc, m := fullMethod[1:slash], fullMethod[slash+1:]
	d, err := protoregistry.GlobalFiles.FindDescriptorByName(protoreflect.FullName(svc))
	if err != nil {
		return annotation{}, false
	}
	sd, ok := d.(protoreflect.ServiceDescriptor)
	if !ok {
		return annotation{}, false
	}
	md := sd.Methods().ByName(protoreflect.Name(m))
	if md == nil {
		return annotation{}, false
	}
	opts, ok := md.Options().(*descriptorpb.MethodOptions)
	if !ok || opts == nil || !proto.HasExtension(opts, floodgatev1.E_Method) {
		return annotation{}, true
	}
	ext, ok := proto.GetExtension(opts, floodgatev1.E_Method).(*floodgatev1.MethodLimits)
	if !ok || ext == nil {
		return annotation{}, true
	}
	a := annotation{ok: true, MethodLimits: MethodLimits{Rule: ext.GetRule()}}
	if c := ext.GetCost(); c > 0 {
		a.Cost = c
	} else if c < 0 {
		logThrottled(&annotationLog, "floodgate: ignoring negative cost annotation", "method", fullMethod, "cost", c)
	}
	if p := floodgate.Priority(ext.GetPriority()); p.Valid() {
		a.Priority = p
	} else {
		logThrottled(&annotationLog, "floodgate: ignoring unknown priority annotation", "method", fullMethod, "priority", int32(ext.GetPriority()))
	}
	return a, true
}

var annotationLog atomic.Int64

// limitsFor resolves a method's cost and priority. Precedence, highest
// first: the policy (WithMethodOptions), the Go map (WithMethods), the proto
// annotation, then def (the HTTP method's priority for HTTP). Cost and
// priority are resolved separately: a source that leaves one unset (0)
// lets the next one decide it.
func (c *config) limitsFor(method string, grpcMethod bool, def floodgate.Priority) (int64, floodgate.Priority) {
	var cost int64
	var prio floodgate.Priority
	if c.methodOptions != nil {
		if pc, pp, ok := c.methodOptions(method); ok {
			cost, prio = pc, pp
		}
	}
	if cost == 0 || prio == floodgate.PriorityUnspecified {
		if ml, ok := c.methods[method]; ok {
			if cost == 0 {
				cost = ml.Cost
			}
			if prio == floodgate.PriorityUnspecified {
				prio = ml.Priority
			}
		}
	}
	if grpcMethod && c.annotations && (cost == 0 || prio == floodgate.PriorityUnspecified) {
		if ml, ok := LookupAnnotation(method); ok {
			if cost == 0 {
				cost = ml.Cost
			}
			if prio == floodgate.PriorityUnspecified {
				prio = ml.Priority
			}
		}
	}
	if prio == floodgate.PriorityUnspecified {
		prio = def
	}
	if cost < 0 {
		logThrottled(&costLog, "floodgate: ignoring negative method cost from the policy", "method", method, "cost", cost)
		cost = 0
	}
	if !prio.Valid() {
		logThrottled(&costLog, "floodgate: ignoring invalid method priority from the policy", "method", method, "priority", uint8(prio))
		prio = def
	}
	return cost, prio
}

// buildRequest fills r for one call.
func (c *config) buildRequest(ctx context.Context, r *floodgate.Request, method string, grpcMethod bool, defPrio floodgate.Priority, peer netip.Addr, md Metadata) {
	r.Method = method
	r.Cost, r.Priority = c.limitsFor(method, grpcMethod, defPrio)
	if c.priorityHeader != "" {
		if v := md.Get(c.priorityHeader); v != "" {
			if p, err := floodgate.ParsePriority(v); err == nil {
				r.Priority = p
			} else {
				logThrottled(&priorityLog, "floodgate: ignoring unparsable priority header", "header", c.priorityHeader, "error", err)
			}
		}
	}
	r.Identity.IP = c.clientIP(peer, md)
	if c.user != nil {
		r.Identity.User = c.user(ctx, md)
	}
	if c.tenant != nil {
		r.Identity.Tenant = c.tenant(ctx, md)
	}
	if c.apiKey != nil {
		r.Identity.APIKey = c.apiKey(ctx, md)
	}
	if c.tier != nil {
		r.Tier = c.tier(ctx, md)
	}
}

var priorityLog, costLog atomic.Int64

// logEvery is the minimum interval between two log lines of one kind.
const logEvery = 10 * time.Second

// logThrottled logs at most once per logEvery per last (a per-site
// timestamp), so a failing dependency cannot flood the log. It never logs
// identity values.
func logThrottled(last *atomic.Int64, msg string, args ...any) {
	now := time.Now().UnixNano()
	prev := last.Load()
	if prev != 0 && now-prev < int64(logEvery) {
		return
	}
	if !last.CompareAndSwap(prev, now) {
		return
	}
	slog.Warn(msg, args...)
}
