package interceptor

import (
	"context"
	"log/slog"
	"net/http"
	"reflect"
	"strconv"
	"sync"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/descriptorpb"

	floodgatev1 "github.com/floodgate-go/floodgate/proto/floodgate/v1"
)

// Where identity is trustworthy. Extractors read one identity value per
// call; which source to believe is the operator's choice:
//
//   - FromClaims: claims of a token an authentication interceptor already
//     verified and put in the context. The caller proved who it is.
//   - FromProtoField, FromMessage: a field of the decoded request message,
//     the very value the handler acts on (the user a login request
//     checks the password of). A client that changes it changes the
//     account it attacks, so it cannot escape a per-user limit on that
//     account by choosing another key.
//   - FromHTTPRequest: a function over the *http.Request, for values the
//     handler itself reads (a form field). It may read the body; the
//     middleware never does by itself.
//   - FromHeader: a header or metadata key. Only for keys an edge proxy
//     sets and strips from client requests: a client picks any header.
//
// FirstOf combines them: the first that finds a value wins.
//
// Unary gRPC calls have their request message when the Request is built;
// streams do not (a stream is admitted when it opens, before any message
// is read), nor does HTTP, so FromProtoField and FromMessage find nothing
// there, and a rule keyed on what only they provide is skipped for those
// calls (Decision.Skipped names it).

// Message returns the decoded request message of a unary gRPC call, or
// nil (streams, HTTP).
func (m Metadata) Message() any { return m.msg }

// HTTPRequest returns the request of an HTTP call, or nil (gRPC).
func (m Metadata) HTTPRequest() *http.Request { return m.req }

// FromMessage returns an Extractor that calls f with the decoded request
// message of a unary gRPC call when it is an M (for example
// *authpb.LoginRequest, or proto.Message for every message), and finds
// nothing otherwise: for other message types, streams and HTTP. A nil f
// yields a nil Extractor, which the With... options report as an error.
//
//	interceptor.WithUser(interceptor.FromMessage(func(_ context.Context, req *authpb.LoginRequest) string {
//		return req.GetUser()
//	}))
func FromMessage[M any](f func(ctx context.Context, msg M) string) Extractor {
	if f == nil {
		return nil
	}
	return func(ctx context.Context, md Metadata) string {
		m, ok := md.msg.(M)
		if !ok {
			return ""
		}
		return f(ctx, m)
	}
}

// FromHTTPRequest returns an Extractor that calls f with the request of an
// HTTP call, and finds nothing for gRPC calls. f may read the request body
// (r.FormValue, r.ParseForm): the middleware hands the same request on to
// the handler, with the form it parsed. The middleware itself never reads
// bodies. A nil f yields a nil Extractor, which the With... options
// report as an error.
func FromHTTPRequest(f func(r *http.Request) string) Extractor {
	if f == nil {
		return nil
	}
	return func(_ context.Context, md Metadata) string {
		if md.req == nil {
			return ""
		}
		return f(md.req)
	}
}

// FromProtoField returns an Extractor reading the field of a unary gRPC
// call's request message that its .proto marks with the floodgate.v1.identity
// field option set to id:
//
//	import "floodgate/v1/annotations.proto";
//
//	message LoginRequest {
//	  string user = 1 [(floodgate.v1.identity) = IDENTITY_USER];
//	  string password = 2;
//	}
//
// The marked field may be a string or an integer (written in decimal), at
// the top of the message or inside singular message fields (the path is
// found once per message descriptor, at most 8 levels deep, and cached;
// messages built at run time whose descriptors share a name are each read
// by their own). It finds nothing for messages without such a field, for
// streams and for HTTP. A message that marks one identity twice, or marks a repeated, map
// or other-typed field, is logged once and read as unmarked. An id that is
// not one of IDENTITY_USER, IDENTITY_TENANT or IDENTITY_API_KEY yields a
// nil Extractor, which the With... options report as an error.
func FromProtoField(id floodgatev1.Identity) Extractor {
	switch id {
	case floodgatev1.Identity_IDENTITY_USER, floodgatev1.Identity_IDENTITY_TENANT, floodgatev1.Identity_IDENTITY_API_KEY:
	default:
		return nil
	}
	return func(_ context.Context, md Metadata) string {
		m, ok := md.msg.(proto.Message)
		if !ok || m == nil {
			return ""
		}
		return readField(m.ProtoReflect(), id)
	}
}

// FirstOf returns an Extractor that asks each of es in order and returns
// the first value found. For a login, FirstOf(FromProtoField(user),
// FromHeader("x-user")) keys the Login call on the user it submits and
// other calls on the header the edge sets. A nil element, or no element,
// yields a nil Extractor, which the With... options report as an error.
func FirstOf(es ...Extractor) Extractor {
	if len(es) == 0 {
		return nil
	}
	for _, e := range es {
		if e == nil {
			return nil
		}
	}
	es = append([]Extractor(nil), es...)
	return func(ctx context.Context, md Metadata) string {
		for _, e := range es {
			if v := e(ctx, md); v != "" {
				return v
			}
		}
		return ""
	}
}

// maxFieldDepth bounds the search for a marked field through nested
// messages (and so recursive message types).
const maxFieldDepth = 8

// fieldPlans caches, per message type and identity, the path of fields
// to the marked one (nil: none). It is bounded by the message type names
// of the calls served: a plan is kept by name, with the descriptor it was
// found in, and used only for a message of that very descriptor. Two
// descriptors may share a name (messages built at run time with dynamicpb,
// a schema loaded again), and a field of one cannot read the other.
var fieldPlans sync.Map // fieldPlanKey -> *fieldPlan

type fieldPlanKey struct {
	msg protoreflect.FullName
	id  floodgatev1.Identity
}

type fieldPlan struct {
	md   protoreflect.MessageDescriptor
	path []protoreflect.FieldDescriptor
	// cmp: md's dynamic type is comparable, so md == another descriptor
	// cannot panic (protobuf-go's are pointers; a plan for a descriptor
	// of another kind is found again on every call instead).
	cmp bool
}

// readField returns the value of the field of m marked with id, or "".
func readField(m protoreflect.Message, id floodgatev1.Identity) string {
	if !m.IsValid() {
		return ""
	}
	md := m.Descriptor()
	k := fieldPlanKey{md.FullName(), id}
	var plan *fieldPlan
	if v, ok := fieldPlans.Load(k); ok {
		plan = v.(*fieldPlan)
	}
	if plan == nil || !plan.cmp || plan.md != md {
		plan = &fieldPlan{md: md, path: planField(md, id), cmp: reflect.TypeOf(md).Comparable()}
		fieldPlans.Store(k, plan)
	}
	path := plan.path
	if len(path) == 0 {
		return ""
	}
	for _, fd := range path[:len(path)-1] {
		if !m.Has(fd) {
			return ""
		}
		m = m.Get(fd).Message()
	}
	fd := path[len(path)-1]
	v := m.Get(fd)
	switch fd.Kind() {
	case protoreflect.StringKind:
		return v.String()
	case protoreflect.Int32Kind, protoreflect.Sint32Kind, protoreflect.Sfixed32Kind,
		protoreflect.Int64Kind, protoreflect.Sint64Kind, protoreflect.Sfixed64Kind:
		if !m.Has(fd) {
			return "" // proto3: 0 is unset
		}
		return strconv.FormatInt(v.Int(), 10)
	case protoreflect.Uint32Kind, protoreflect.Fixed32Kind, protoreflect.Uint64Kind, protoreflect.Fixed64Kind:
		if !m.Has(fd) {
			return ""
		}
		return strconv.FormatUint(v.Uint(), 10)
	}
	return ""
}

// planField finds the path to the field of md marked with id, logging
// (once per message descriptor and identity: the result is cached) a
// marking it cannot use. It never descends into a message type already on the path,
// so a recursive type is read at its outermost level only.
func planField(md protoreflect.MessageDescriptor, id floodgatev1.Identity) []protoreflect.FieldDescriptor {
	var found [][]protoreflect.FieldDescriptor
	onPath := map[protoreflect.FullName]bool{}
	var walk func(md protoreflect.MessageDescriptor, prefix []protoreflect.FieldDescriptor)
	walk = func(md protoreflect.MessageDescriptor, prefix []protoreflect.FieldDescriptor) {
		if len(prefix) >= maxFieldDepth || onPath[md.FullName()] {
			return
		}
		onPath[md.FullName()] = true
		defer delete(onPath, md.FullName())
		fields := md.Fields()
		for i := 0; i < fields.Len(); i++ {
			fd := fields.Get(i)
			if identityOf(fd) == id {
				if usableField(fd) {
					found = append(found, append(append([]protoreflect.FieldDescriptor(nil), prefix...), fd))
				} else {
					slog.Warn("floodgate: ignoring a floodgate.v1.identity field option on a field that is not a singular string or integer",
						"field", string(fd.FullName()), "identity", id.String())
				}
				continue
			}
			if fd.Kind() == protoreflect.MessageKind && fd.Cardinality() != protoreflect.Repeated && !fd.IsMap() {
				walk(fd.Message(), append(prefix, fd))
			}
		}
	}
	walk(md, nil)
	switch len(found) {
	case 0:
		return nil
	case 1:
		return found[0]
	}
	slog.Warn("floodgate: message marks one identity on several fields; reading none of them",
		"message", string(md.FullName()), "identity", id.String(), "fields", len(found))
	return nil
}

func identityOf(fd protoreflect.FieldDescriptor) floodgatev1.Identity {
	opts, ok := fd.Options().(*descriptorpb.FieldOptions)
	if !ok || opts == nil || !proto.HasExtension(opts, floodgatev1.E_Identity) {
		return floodgatev1.Identity_IDENTITY_UNSPECIFIED
	}
	id, _ := proto.GetExtension(opts, floodgatev1.E_Identity).(floodgatev1.Identity)
	return id
}

func usableField(fd protoreflect.FieldDescriptor) bool {
	if fd.Cardinality() == protoreflect.Repeated || fd.IsMap() {
		return false
	}
	switch fd.Kind() {
	case protoreflect.StringKind,
		protoreflect.Int32Kind, protoreflect.Sint32Kind, protoreflect.Sfixed32Kind,
		protoreflect.Int64Kind, protoreflect.Sint64Kind, protoreflect.Sfixed64Kind,
		protoreflect.Uint32Kind, protoreflect.Fixed32Kind, protoreflect.Uint64Kind, protoreflect.Fixed64Kind:
		return true
	}
	return false
}
