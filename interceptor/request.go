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
	"github.com/floodgate-go/floodgate/internal/reqctx"
	floodgatev1 "github.com/floodgate-go/floodgate/proto/floodgate/v1"
)

// annotationCache holds the (floodgate.v1.method) options of every gRPC
// method looked up so far, as a copy-on-write map: lookups are a plain map
// read (no allocation, no lock), and a miss copies the map under
// annotationMu. Only methods found in the registry are cached, so the cache
// is bounded by the registered services, and an invalid annotation is
// logged once per method, when it is first read.
var (
	annotationCache atomic.Pointer[map[string]annotation]
	annotationMu    sync.Mutex
)

// annotationFor returns the (floodgate.v1.method) option of a gRPC full
// method ("/pkg.Svc/Method") from the descriptors registered in
// protoregistry.GlobalFiles; ok is false when the method is unknown or not
// annotated.
func annotationFor(fullMethod string) (floodgate.MethodOptions, bool) {
	if m := annotationCache.Load(); m != nil {
		if a, ok := (*m)[fullMethod]; ok {
			return a.MethodOptions, a.ok
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
	return a.MethodOptions, a.ok
}

type annotation struct {
	floodgate.MethodOptions
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
	a := annotation{ok: true}
	if c := ext.GetCost(); c > 0 {
		a.Cost = c
	} else if c < 0 {
		slog.Warn("floodgate: ignoring negative cost annotation", "method", fullMethod, "cost", c)
	}
	if p := floodgate.Priority(ext.GetPriority()); p.Valid() {
		a.Priority = p
	} else {
		slog.Warn("floodgate: ignoring unknown priority annotation", "method", fullMethod, "priority", int32(ext.GetPriority()))
	}
	return a, true
}

// methodSource is what a stage that knows per-method options offers: a
// *tiers.Limiter answers from its policy's methods: section.
type methodSource interface {
	MethodOptions(method string) (floodgate.MethodOptions, bool)
}

// methodOptions resolves a method's cost and priority: the one place that
// does. For cost and priority separately, the first source that sets one
// wins: the policies of the stages this Interceptor wraps (their methods:
// sections, in chain order), the Go map (WithMethods), the proto annotation
// (gRPC only); then def for priority (the HTTP method's). A trusted
// priority header (applied by build) overrides the result's priority.
func (i *Interceptor) methodOptions(method string, grpcMethod bool, def floodgate.Priority) floodgate.MethodOptions {
	var mo floodgate.MethodOptions
	fill := func(o floodgate.MethodOptions) bool {
		if mo.Cost == 0 {
			mo.Cost = o.Cost
		}
		if mo.Priority == floodgate.PriorityUnspecified {
			mo.Priority = o.Priority
		}
		return mo.Cost != 0 && mo.Priority != floodgate.PriorityUnspecified
	}
	done := false
	if ps := i.policies.Load(); ps != nil {
		for _, p := range *ps {
			if o, ok := p.MethodOptions(method); ok && o.Cost >= 0 && o.Priority.Valid() && fill(o) {
				done = true
				break
			}
		}
	}
	if !done {
		if o, ok := i.c.methods[method]; ok {
			done = fill(o)
		}
	}
	if !done && grpcMethod && i.c.annotations {
		if o, ok := annotationFor(method); ok {
			fill(o)
		}
	}
	if mo.Priority == floodgate.PriorityUnspecified {
		mo.Priority = def
	}
	return mo
}

// call is what a transport knows of one call before it is admitted.
type call struct {
	method     string
	grpcMethod bool
	def        floodgate.Priority // the transport's default priority
	remoteAddr string             // HTTP: http.Request.RemoteAddr; gRPC: the peer in ctx
	md         Metadata
}

// peer is the call's immediate peer address, read only when a Request is
// built.
func (cl *call) peer(ctx context.Context) netip.Addr {
	if cl.grpcMethod && cl.remoteAddr == "" {
		return peerAddr(ctx) // a gRPC call; a seam.Gate call names its peer
	}
	if ap, err := netip.ParseAddrPort(cl.remoteAddr); err == nil {
		return normalize(ap.Addr())
	}
	return parseHostAddr(cl.remoteAddr)
}

// build fills r, a new Request, for one call.
func (i *Interceptor) build(ctx context.Context, r *floodgate.Request, cl *call) {
	c := i.c
	r.Method = cl.method
	mo := i.methodOptions(cl.method, cl.grpcMethod, cl.def)
	r.Cost, r.Priority = mo.Cost, mo.Priority
	if c.cost != nil {
		i.estimate(ctx, r, cl) // WithCost
	}
	if c.priorityHeader != "" {
		if v := cl.md.Get(c.priorityHeader); v != "" {
			if p, err := floodgate.ParsePriority(v); err == nil {
				r.Priority = p
			} else {
				logThrottled(&i.logs.priority, "floodgate: ignoring unparsable priority header", "header", c.priorityHeader, "error", err)
			}
		}
	}
	r.Identity.IP = c.resolveIP(ctx, cl)
	if c.user != nil {
		r.Identity.User = c.user(ctx, cl.md)
	}
	if c.tenant != nil {
		r.Identity.Tenant = c.tenant(ctx, cl.md)
	}
	if c.apiKey != nil {
		r.Identity.APIKey = c.apiKey(ctx, cl.md)
	}
	if c.tier != nil {
		r.Tier = c.tier(ctx, cl.md)
	}
	i.fillHeaders(r, cl.md)
}

// request returns the Request the call's stage decides on, and the context
// that carries it.
//
// The first floodgate interceptor of a call builds the Request and stores
// it in the context; every later one reuses it, so every stage of a call
// decides on one Request: the shedder and the rate limiter see one
// priority and one cost. A later interceptor made by another Interceptor
// whose options would have built the Request differently (a stage with a
// methods: section the first one does not know, other extractors) logs,
// at most once per 10 s, that its options do not apply and that the chain
// should be made from one Interceptor.
func (i *Interceptor) request(ctx context.Context, cl *call) (*floodgate.Request, context.Context) {
	if r, ok := floodgate.FromContext(ctx); ok {
		if reqctx.Origin(ctx) != i && i.changes(r.Method) {
			i.logForeign(cl.method)
		}
		return r, ctx
	}
	nctx, r := reqctx.New[floodgate.Request](ctx, i)
	i.build(nctx, r, cl) // nctx: a WithCost func may report meters' estimates
	return r, nctx
}

// logForeign logs (rate-limited) that another Interceptor built the
// Request this one's options would have built differently. Never inlined:
// it is off the path of a chain made from one Interceptor.
//
//go:noinline
func (i *Interceptor) logForeign(method string) {
	logThrottled(&i.logs.rebuild, "floodgate: this interceptor's request options do not apply: an earlier floodgate interceptor, made by another interceptor.New, built the request, and every stage of a call decides on that one request; make every interceptor of a chain from one Interceptor",
		"method", method)
}

// changes reports whether this Interceptor would build a Request for method
// differently from an Interceptor with no options: it was given an option
// that changes how a Request is built, or a stage it wraps has options for
// method.
func (i *Interceptor) changes(method string) bool {
	if i.c.builds || i.asksHeaders() {
		return true
	}
	if ps := i.policies.Load(); ps != nil {
		for _, p := range *ps {
			if _, ok := p.MethodOptions(method); ok {
				return true
			}
		}
	}
	return false
}

// logs are the per-interceptor log throttles: each kind of warning is
// logged at most once per logEvery by one Interceptor.
type logs struct {
	stageErr, route, priority, sf, rebuild atomic.Int64
}

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
