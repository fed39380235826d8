package interceptor

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/descriptorpb"
	"google.golang.org/protobuf/types/dynamicpb"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/internal/shoppb"
	floodgatev1 "github.com/floodgate-go/floodgate/proto/floodgate/v1"
	"github.com/floodgate-go/floodgate/tiers"
)

const (
	idUser   = floodgatev1.Identity_IDENTITY_USER
	idTenant = floodgatev1.Identity_IDENTITY_TENANT
	idAPIKey = floodgatev1.Identity_IDENTITY_API_KEY
)

func TestFromProtoFieldShop(t *testing.T) {
	t.Parallel()
	user := FromProtoField(idUser)
	ctx := context.Background()
	for _, tc := range []struct {
		msg  any
		want string
	}{
		{&shoppb.LoginRequest{User: "alice", Password: "x"}, "alice"},
		{&shoppb.LoginRequest{}, ""},
		{&shoppb.SearchRequest{Query: "alice"}, ""}, // not marked
		{(*shoppb.LoginRequest)(nil), ""},
		{"not a message", ""},
		{nil, ""},
	} {
		if got := user(ctx, Metadata{msg: tc.msg}); got != tc.want {
			t.Errorf("user of %#v = %q, want %q", tc.msg, got, tc.want)
		}
	}
	if got := FromProtoField(idTenant)(ctx, Metadata{msg: &shoppb.LoginRequest{User: "alice"}}); got != "" {
		t.Errorf("tenant of a login = %q, want none", got)
	}
	if FromProtoField(floodgatev1.Identity_IDENTITY_UNSPECIFIED) != nil || FromProtoField(99) != nil {
		t.Error("FromProtoField of no identity is not nil")
	}
}

// dynamicMessages builds, at run time, messages marking identities the
// ways a .proto can: nested, integer, twice, on repeated or other-typed
// fields, recursive.
func dynamicMessages(t *testing.T) map[string]protoreflect.MessageDescriptor {
	t.Helper()
	mark := func(id floodgatev1.Identity) *descriptorpb.FieldOptions {
		o := &descriptorpb.FieldOptions{}
		proto.SetExtension(o, floodgatev1.E_Identity, id)
		return o
	}
	opt := descriptorpb.FieldDescriptorProto_LABEL_OPTIONAL.Enum()
	rep := descriptorpb.FieldDescriptorProto_LABEL_REPEATED.Enum()
	field := func(name string, n int32, typ descriptorpb.FieldDescriptorProto_Type, label *descriptorpb.FieldDescriptorProto_Label, typeName string, o *descriptorpb.FieldOptions) *descriptorpb.FieldDescriptorProto {
		f := &descriptorpb.FieldDescriptorProto{Name: proto.String(name), Number: proto.Int32(n), Type: typ.Enum(), Label: label, Options: o, JsonName: proto.String(name)}
		if typeName != "" {
			f.TypeName = proto.String(typeName)
		}
		return f
	}
	const (
		str = descriptorpb.FieldDescriptorProto_TYPE_STRING
		i64 = descriptorpb.FieldDescriptorProto_TYPE_INT64
		u32 = descriptorpb.FieldDescriptorProto_TYPE_UINT32
		dbl = descriptorpb.FieldDescriptorProto_TYPE_DOUBLE
		msg = descriptorpb.FieldDescriptorProto_TYPE_MESSAGE
	)
	fdp := &descriptorpb.FileDescriptorProto{
		Name:    proto.String("extracttest/test.proto"),
		Package: proto.String("extracttest"),
		Syntax:  proto.String("proto3"),
		MessageType: []*descriptorpb.DescriptorProto{
			{Name: proto.String("Creds"), Field: []*descriptorpb.FieldDescriptorProto{
				field("user", 1, str, opt, "", mark(idUser)),
				field("tenant", 2, i64, opt, "", mark(idTenant)),
			}},
			{Name: proto.String("Outer"), Field: []*descriptorpb.FieldDescriptorProto{
				field("creds", 1, msg, opt, ".extracttest.Creds", nil),
				field("key_id", 2, u32, opt, "", mark(idAPIKey)),
			}},
			{Name: proto.String("Twice"), Field: []*descriptorpb.FieldDescriptorProto{
				field("a", 1, str, opt, "", mark(idUser)),
				field("creds", 2, msg, opt, ".extracttest.Creds", nil),
			}},
			{Name: proto.String("Bad"), Field: []*descriptorpb.FieldDescriptorProto{
				field("users", 1, str, rep, "", mark(idUser)),
				field("score", 2, dbl, opt, "", mark(idTenant)),
			}},
			{Name: proto.String("Node"), Field: []*descriptorpb.FieldDescriptorProto{
				field("next", 1, msg, opt, ".extracttest.Node", nil),
				field("user", 2, str, opt, "", mark(idUser)),
			}},
		},
	}
	fd, err := protodesc.NewFile(fdp, nil)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]protoreflect.MessageDescriptor{}
	for i := 0; i < fd.Messages().Len(); i++ {
		m := fd.Messages().Get(i)
		out[string(m.Name())] = m
	}
	return out
}

func TestFromProtoFieldPaths(t *testing.T) {
	logs := captureSlog(t)
	mds := dynamicMessages(t)
	newMsg := func(name string, set func(m protoreflect.Message)) proto.Message {
		m := dynamicpb.NewMessage(mds[name])
		if set != nil {
			set(m)
		}
		return m
	}
	setStr := func(m protoreflect.Message, f string, v string) {
		m.Set(m.Descriptor().Fields().ByName(protoreflect.Name(f)), protoreflect.ValueOfString(v))
	}
	creds := func(m protoreflect.Message) protoreflect.Message {
		return m.Mutable(m.Descriptor().Fields().ByName("creds")).Message()
	}
	outer := newMsg("Outer", func(m protoreflect.Message) {
		c := creds(m)
		setStr(c, "user", "bob")
		c.Set(c.Descriptor().Fields().ByName("tenant"), protoreflect.ValueOfInt64(-42))
		m.Set(m.Descriptor().Fields().ByName("key_id"), protoreflect.ValueOfUint32(7))
	})
	twice := newMsg("Twice", func(m protoreflect.Message) {
		setStr(m, "a", "x")
		setStr(creds(m), "user", "y")
	})
	bad := newMsg("Bad", nil)
	node := newMsg("Node", func(m protoreflect.Message) {
		setStr(m, "user", "top")
		next := m.Mutable(m.Descriptor().Fields().ByName("next")).Message()
		setStr(next, "user", "nested")
	})
	ctx := context.Background()
	for _, tc := range []struct {
		name string
		msg  proto.Message
		id   floodgatev1.Identity
		want string
	}{
		{"nested string", outer, idUser, "bob"},
		{"nested integer", outer, idTenant, "-42"},
		{"unsigned", outer, idAPIKey, "7"},
		{"unset nested message", newMsg("Outer", nil), idUser, ""},
		{"unset integer", newMsg("Outer", nil), idAPIKey, ""},
		{"marked twice", twice, idUser, ""},
		{"repeated", bad, idUser, ""},
		{"double", bad, idTenant, ""},
		{"recursive type: the top field", node, idUser, "top"},
	} {
		for range 2 { // the second read comes from the cached plan
			if got := FromProtoField(tc.id)(ctx, Metadata{msg: tc.msg}); got != tc.want {
				t.Errorf("%s: %s = %q, want %q", tc.name, tc.id, got, tc.want)
			}
		}
	}
	out := logs.String()
	for _, want := range []string{
		`message marks one identity on several fields; reading none of them" message=extracttest.Twice identity=IDENTITY_USER fields=2`,
		`not a singular string or integer" field=extracttest.Bad.users identity=IDENTITY_USER`,
		`not a singular string or integer" field=extracttest.Bad.score identity=IDENTITY_TENANT`,
	} {
		if strings.Count(out, want) != 1 {
			t.Errorf("log has not exactly one %q:\n%s", want, out)
		}
	}
}

func TestExtractorCombinators(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	login := FromMessage(func(_ context.Context, m *shoppb.LoginRequest) string { return m.GetUser() })
	if got := login(ctx, Metadata{msg: &shoppb.LoginRequest{User: "carol"}}); got != "carol" {
		t.Errorf("FromMessage = %q", got)
	}
	if got := login(ctx, Metadata{msg: &shoppb.SearchRequest{}}); got != "" {
		t.Errorf("FromMessage of another type = %q", got)
	}
	form := FromHTTPRequest(func(r *http.Request) string { return r.FormValue("user") })
	req := httptest.NewRequest("POST", "/v1/login?user=dave", nil)
	if got := form(ctx, Metadata{h: req.Header, req: req}); got != "dave" {
		t.Errorf("FromHTTPRequest = %q", got)
	}
	if got := form(ctx, Metadata{ctx: ctx}); got != "" {
		t.Errorf("FromHTTPRequest on gRPC = %q", got)
	}
	first := FirstOf(FromProtoField(idUser), form, FromHeader("x-user"))
	md := metadata.NewIncomingContext(ctx, metadata.Pairs("x-user", "header"))
	for _, tc := range []struct {
		md   Metadata
		want string
	}{
		{Metadata{ctx: md, msg: &shoppb.LoginRequest{User: "msg"}}, "msg"},
		{Metadata{ctx: md, msg: &shoppb.SearchRequest{}}, "header"},
		{Metadata{h: req.Header, req: req}, "dave"},
		{Metadata{}, ""},
	} {
		if got := first(ctx, tc.md); got != tc.want {
			t.Errorf("FirstOf = %q, want %q", got, tc.want)
		}
	}
	for name, e := range map[string]Extractor{
		"FromMessage(nil)":     FromMessage[*shoppb.LoginRequest](nil),
		"FromHTTPRequest(nil)": FromHTTPRequest(nil),
		"FirstOf()":            FirstOf(),
		"FirstOf(nil)":         FirstOf(FromHeader("a"), nil),
	} {
		if e != nil {
			t.Errorf("%s is not nil", name)
		}
		if _, err := New(WithUser(e)); err == nil || !strings.Contains(err.Error(), "WithUser: nil Extractor") {
			t.Errorf("WithUser(%s): %v", name, err)
		}
	}
}

// captureSlog sends slog's default logger to a buffer for the test.
func captureSlog(t *testing.T) *bytes.Buffer {
	var buf bytes.Buffer
	prev := slog.Default()
	slog.SetDefault(slog.New(slog.NewTextHandler(&buf, nil)))
	t.Cleanup(func() { slog.SetDefault(prev) })
	return &buf
}

// shopServer answers Login (password "hunter2") and ListItems (no items).
type shopServer struct {
	shoppb.UnimplementedShopServer
}

func (shopServer) Login(_ context.Context, req *shoppb.LoginRequest) (*shoppb.LoginReply, error) {
	if req.GetPassword() != "hunter2" {
		return nil, status.Error(codes.Unauthenticated, "wrong user or password")
	}
	return &shoppb.LoginReply{Token: "session"}, nil
}

func (shopServer) ListItems(*shoppb.ListItemsRequest, grpc.ServerStreamingServer[shoppb.Item]) error {
	return nil
}

// serveShop serves the shop on a loopback port of network ("tcp4" or
// "tcp6") with the given server options and returns a client.
func serveShop(t *testing.T, network string, opts ...grpc.ServerOption) shoppb.ShopClient {
	t.Helper()
	addr := "127.0.0.1:0"
	if network == "tcp6" {
		addr = "[::1]:0"
	}
	lis, err := net.Listen(network, addr)
	if err != nil {
		t.Skipf("no %s loopback: %v", network, err)
	}
	srv := grpc.NewServer(opts...)
	shoppb.RegisterShopServer(srv, shopServer{})
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return shoppb.NewShopClient(conn)
}

// TestMessageIdentityUnaryNotStreams: over a real gRPC server, a unary
// call is keyed on its message's marked field; a stream, admitted before
// its message is read, is not.
func TestMessageIdentityUnaryNotStreams(t *testing.T) {
	t.Parallel()
	st := &stage{}
	fg := MustNew(WithUser(FirstOf(FromProtoField(idUser), FromHeader("x-user"))))
	shop := serveShop(t, "tcp4", grpc.ChainUnaryInterceptor(fg.UnaryServer(st)), grpc.ChainStreamInterceptor(fg.StreamServer(st)))
	ctx := metadata.AppendToOutgoingContext(t.Context(), "x-user", "mallory")
	if _, err := shop.Login(ctx, &shoppb.LoginRequest{User: "alice", Password: "hunter2"}); err != nil {
		t.Fatal(err)
	}
	stream, err := shop.ListItems(ctx, &shoppb.ListItemsRequest{Limit: 1})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := stream.Recv(); err != io.EOF {
		t.Fatalf("stream: %v", err)
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	if len(st.seen) != 2 || st.seen[0].Identity.User != "alice" || st.seen[1].Identity.User != "mallory" {
		t.Fatalf("users seen: %+v", st.seen)
	}
}

// TestHTTPRequestExtractorKeepsForm: an extractor that reads the form
// leaves it to the handler.
func TestHTTPRequestExtractorKeepsForm(t *testing.T) {
	t.Parallel()
	st := &stage{}
	mw := MustNew(WithUser(FromHTTPRequest(func(r *http.Request) string { return r.PostFormValue("user") }))).HTTP(st)
	var handlerSaw string
	h := mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		handlerSaw = r.PostFormValue("user") + "/" + r.PostFormValue("password")
	}))
	req := httptest.NewRequest("POST", "/v1/login", strings.NewReader(url.Values{"user": {"erin"}, "password": {"pw"}}.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	h.ServeHTTP(httptest.NewRecorder(), req)
	if handlerSaw != "erin/pw" || len(st.seen) != 1 || st.seen[0].Identity.User != "erin" {
		t.Errorf("handler saw %q; stage saw %+v", handlerSaw, st.seen)
	}
}

const unresolvablePolicy = `
rules:
  - {name: grpc-login-user, match: {method: /floodgate.shop.v1.Shop/Login}, key: [user], rate: 3/10s}
  - {name: http-login-user, match: {method: "POST /v1/login"}, key: [user], rate: 3/10s}
  - {name: tenant-plan, key: [tenant], rate: 100/1s}
  - {name: per-ip, key: [ip], rate: 100/1s}
`

// TestUnresolvableScopeWarning: wrapping a Limiter whose rules need a
// scope no extractor fills warns once per rule (unary and stream share
// it), or panics with WithStrictIdentity; and the requests' decisions
// name the skipped rules.
func TestUnresolvableScopeWarning(t *testing.T) {
	logs := captureSlog(t)
	p, err := tiers.Load([]byte(unresolvablePolicy))
	if err != nil {
		t.Fatal(err)
	}
	newLimiter := func() *tiers.Limiter {
		l, err := tiers.NewLimiter(newTestMemstore(t), p)
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	l := newLimiter()
	fg := MustNew(WithTenant(FromHeader("x-tenant")))
	var last lastDecision
	obs := MustNew(WithTenant(FromHeader("x-tenant")), WithObserver(&last))
	unary, stream := obs.UnaryServer(l), obs.StreamServer(l)
	_, _ = fg.UnaryServer(l), fg.StreamServer(l)
	out := logs.String()
	if strings.Count(out, "level=WARN") != 1 || !strings.Contains(out, "rule=grpc-login-user scope=user transport=grpc") {
		t.Fatalf("warnings after wrapping for gRPC:\n%s\nwant one, for grpc-login-user", out)
	}
	logs.Reset()
	MustNew(WithTenant(FromHeader("x-tenant"))).HTTP(l)
	if out := logs.String(); strings.Count(out, "level=WARN") != 1 || !strings.Contains(out, "rule=http-login-user scope=user transport=http") {
		t.Fatalf("warnings after wrapping for HTTP:\n%s\nwant one, for http-login-user", out)
	}
	logs.Reset()
	MustNew(WithUser(FromProtoField(idUser)), WithTenant(FromHeader("x-tenant"))).UnaryServer(l)
	if out := logs.String(); out != "" {
		t.Errorf("with every scope filled, log:\n%s", out)
	}

	// A call says what it skipped, through the Observer too.
	shop := serveShop(t, "tcp4", grpc.ChainUnaryInterceptor(unary), grpc.ChainStreamInterceptor(stream))
	if _, err := shop.Login(t.Context(), &shoppb.LoginRequest{User: "alice"}); status.Code(err) != codes.Unauthenticated {
		t.Fatalf("login: %v", err)
	}
	if d := last.get(); d.Skipped != "grpc-login-user,tenant-plan" || d.Policy != "per-ip" {
		t.Errorf("observed %+v, want Skipped grpc-login-user,tenant-plan", d)
	}

	// Strict: panics at construction naming the rule.
	func() {
		defer func() {
			r := recover()
			msg, _ := r.(string)
			if !strings.Contains(msg, `interceptor: WithStrictIdentity: tiers: rule "grpc-login-user" (rules[0], line 3) is keyed on user, which the grpc transport never fills (give it a source: the policy file's identity: user:, or interceptor.WithUser`) ||
				strings.Contains(msg, "http-login-user") {
				t.Errorf("strict UnaryServer panicked with %v", r)
			}
		}()
		MustNew(WithStrictIdentity(), WithTenant(FromHeader("x-tenant"))).UnaryServer(newLimiter())
	}()
	// And a strict transport refuses a reload with such a rule.
	strict := newLimiter()
	MustNew(WithStrictIdentity(), WithUser(FromProtoField(idUser)), WithTenant(FromHeader("x-tenant"))).UnaryServer(strict)
	worse, err := tiers.Load([]byte(unresolvablePolicy + "  - {name: per-key, key: [api_key], rate: 1/1s}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if err := strict.SetPolicy(worse); err == nil || !strings.Contains(err.Error(), `rule "per-key"`) || strict.Policy() != p {
		t.Errorf("strict reload with an unresolvable rule: %v", err)
	}
	// Stages that check no scopes are left alone.
	MustNew(WithStrictIdentity()).UnaryServer(floodgate.Chain{&stage{}})
}

// TestFromProtoFieldSameName reads messages of two descriptors with the
// same full name, built at run time (as a proxy that loads a schema
// again would), in turn: each is read by its own fields. A plan cached by
// name alone read one with the other's fields, which dynamicpb refuses
// with a panic.
func TestFromProtoFieldSameName(t *testing.T) {
	t.Parallel()
	flat := func() protoreflect.MessageDescriptor {
		o := &descriptorpb.FieldOptions{}
		proto.SetExtension(o, floodgatev1.E_Identity, idUser)
		fd, err := protodesc.NewFile(&descriptorpb.FileDescriptorProto{
			Name:    proto.String("extracttest/flat.proto"),
			Package: proto.String("extracttest"),
			Syntax:  proto.String("proto3"),
			MessageType: []*descriptorpb.DescriptorProto{{Name: proto.String("Outer"), Field: []*descriptorpb.FieldDescriptorProto{{
				Name: proto.String("login"), Number: proto.Int32(5), JsonName: proto.String("login"), Options: o,
				Type:  descriptorpb.FieldDescriptorProto_TYPE_STRING.Enum(),
				Label: descriptorpb.FieldDescriptorProto_LABEL_OPTIONAL.Enum(),
			}}}},
		}, nil)
		if err != nil {
			t.Fatal(err)
		}
		return fd.Messages().Get(0)
	}()
	nestedA, nestedB := dynamicMessages(t)["Outer"], dynamicMessages(t)["Outer"]
	if nestedA.FullName() != flat.FullName() || nestedA == nestedB {
		t.Fatalf("descriptors %s, %s: want one name, distinct descriptors", nestedA.FullName(), flat.FullName())
	}
	nested := func(md protoreflect.MessageDescriptor, user string) proto.Message {
		m := dynamicpb.NewMessage(md)
		c := m.Mutable(md.Fields().ByName("creds")).Message()
		c.Set(c.Descriptor().Fields().ByName("user"), protoreflect.ValueOfString(user))
		return m
	}
	fm := dynamicpb.NewMessage(flat)
	fm.Set(flat.Fields().ByName("login"), protoreflect.ValueOfString("flat"))
	msgs := []struct {
		msg  proto.Message
		want string
	}{{nested(nestedA, "a"), "a"}, {fm, "flat"}, {nested(nestedB, "b"), "b"}}
	read := FromProtoField(idUser)
	for i := range 6 {
		tc := msgs[i%len(msgs)]
		if got := read(context.Background(), Metadata{msg: tc.msg}); got != tc.want {
			t.Errorf("read %d: %q, want %q", i, got, tc.want)
		}
	}
}

// BenchmarkFromProtoField reads the marked user of a generated message
// through the cached plan: the cost FromProtoField adds to a call.
func BenchmarkFromProtoField(b *testing.B) {
	read := FromProtoField(idUser)
	md := Metadata{msg: &shoppb.LoginRequest{User: "carol"}}
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if read(ctx, md) != "carol" {
			b.Fatal("not read")
		}
	}
}
