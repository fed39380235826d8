package guard

import (
	"bytes"
	"context"
	"log/slog"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/status"

	"github.com/floodgate-go/floodgate/internal/testpb"
)

type echo struct{ testpb.UnimplementedEchoServer }

func (echo) Plain(_ context.Context, in *testpb.EchoRequest) (*testpb.EchoResponse, error) {
	return &testpb.EchoResponse{Message: in.GetMessage()}, nil
}

// TestGRPCServerOptions puts the chain in front of a gRPC server through
// ServerOptions and calls it through DialOptions: a rule on the method
// admits its limit and refuses the rest with RESOURCE_EXHAUSTED.
func TestGRPCServerOptions(t *testing.T) {
	t.Parallel()
	g, err := New(context.Background(), WithInProcess(), WithLogger(quiet), WithPolicy([]byte(`
rules:
  - name: plain
    match: {method: /floodgate.test.v1.Echo/Plain}
    rate: 2/1h
`)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { g.Close(context.Background()) }) // after the server stops (serveLoopback)
	srv := grpc.NewServer(g.ServerOptions()...)
	testpb.RegisterEchoServer(srv, echo{})
	conn := serveLoopback(t, srv, g.DialOptions()...)
	client := testpb.NewEchoClient(conn)
	codesSeen := map[codes.Code]int{}
	for range 4 {
		_, err := client.Plain(context.Background(), &testpb.EchoRequest{Message: "hi"})
		codesSeen[status.Code(err)]++
	}
	if codesSeen[codes.OK] != 2 || codesSeen[codes.ResourceExhausted] != 2 {
		t.Errorf("codes %v, want 2 OK and 2 ResourceExhausted", codesSeen)
	}
}

// TestCheckServer names each gRPC method of the policy the server does
// not register: a rule's exact method and glob, and a methods: entry;
// HTTP routes and matching names pass.
func TestCheckServer(t *testing.T) {
	t.Parallel()
	g, err := New(context.Background(), WithInProcess(), WithLogger(quiet), WithPolicy([]byte(`
rules:
  - {name: plain, match: {method: /floodgate.test.v1.Echo/Plain}, rate: 2/1h}
  - {name: echo-all, match: {method: "/floodgate.test.v1.Echo/*"}, rate: 2/1h}
  - {name: unlinked, match: {method: /other.v1.Svc/Get}, rate: 2/1h}
  - {name: other, match: {method: "/other.v1.Svc/*"}, rate: 2/1h}
  - {name: route, match: {method: "GET /v1/items/{id}"}, rate: 2/1h}
methods:
  /floodgate.test.v1.Echo/Expensive: {cost: 2}
  /floodgate.test.v1.Echo/Gone: {cost: 2}
`)))
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close(context.Background())
	srv := grpc.NewServer(g.ServerOptions()...)
	testpb.RegisterEchoServer(srv, echo{})
	err = g.CheckServer(srv)
	if err == nil {
		t.Fatal("no error")
	}
	for _, want := range []string{
		`rule "unlinked" (rules[2]): method "/other.v1.Svc/Get" matches no method the server registers`,
		`rule "other" (rules[3]): method "/other.v1.Svc/*" matches no method`,
		`methods: "/floodgate.test.v1.Echo/Gone" is not a method the server registers`,
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error does not say %q:\n%v", want, err)
		}
	}
	for _, not := range []string{`"plain"`, `"echo-all"`, `"route"`, `Echo/Expensive" is not`} {
		if strings.Contains(err.Error(), not) {
			t.Errorf("error names %s, which matches:\n%v", not, err)
		}
	}
}

// TestNewChecksLinkedServices: a rule naming a method that a service
// linked into the binary lacks is refused at New, without CheckServer;
// a service the binary does not link is only logged, at debug level (an
// HTTP service may share a policy with gRPC ones; CheckServer checks it
// against the server).
func TestNewChecksLinkedServices(t *testing.T) {
	t.Parallel()
	_, err := New(context.Background(), WithInProcess(), WithLogger(quiet), WithPolicy([]byte(`
rules:
  - {name: plain, match: {method: /floodgate.test.v1.Echo/Plain}, rate: 2/1h}
  - {name: typo, match: {method: /floodgate.test.v1.Echo/Plian}, rate: 2/1h}
`)))
	if err == nil || !strings.Contains(err.Error(), `rule "typo" (rules[1]): method "/floodgate.test.v1.Echo/Plian": service floodgate.test.v1.Echo has no method Plian (it has `) || strings.Contains(err.Error(), `"plain"`) {
		t.Fatalf("New = %v, want typo refused", err)
	}
	var logs bytes.Buffer
	g, err := New(context.Background(), WithInProcess(), WithLogger(slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))), WithPolicy([]byte(`
rules:
  - {name: elsewhere, match: {method: /other.v1.Svc/Get}, rate: 2/1h}
  - {name: glob, match: {method: "/floodgate.test.v1.Echo/P*"}, rate: 2/1h}
  - {name: glob-none, match: {method: "/floodgate.test.v1.Echo/Z*"}, rate: 2/1h}
`)))
	if err != nil {
		t.Fatal(err)
	}
	g.Close(context.Background())
	out := logs.String()
	if !strings.Contains(out, "rule=elsewhere") || !strings.Contains(out, "rule=glob-none") || strings.Contains(out, "rule=glob ") {
		t.Errorf("logs:\n%s\nwant elsewhere and glob-none, not glob", out)
	}
}

// countCodec is the proto codec, counting the messages the server decodes.
type countCodec struct {
	encoding.CodecV2
	decoded atomic.Int64
}

func (c *countCodec) Unmarshal(data mem.BufferSlice, v any) error {
	c.decoded.Add(1)
	return c.CodecV2.Unmarshal(data, v)
}

// TestGRPCServerOptionsShedAtTap: ServerOptions sheds at the tap: a shed
// call's message is never decoded, and an admitted call holds one of the
// shedder's slots, released when it ends.
func TestGRPCServerOptionsShedAtTap(t *testing.T) {
	t.Parallel()
	g, err := New(context.Background(), WithInProcess(), WithLogger(quiet), WithPolicy([]byte(`
rules: []
shedder: {capacity: 2, thresholds: {test: 0.5, read: 0.5, write: 0.5}}
`)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { g.Close(context.Background()) }) // after the server stops (serveLoopback)
	codec := &countCodec{CodecV2: encoding.GetCodecV2("proto")}
	srv := grpc.NewServer(append(g.ServerOptions(), grpc.ForceServerCodecV2(codec))...)
	h := holder{entered: make(chan struct{}), release: make(chan struct{})}
	testpb.RegisterEchoServer(srv, h)
	conn := serveLoopback(t, srv)
	client := testpb.NewEchoClient(conn)
	held := make(chan error, 1)
	go func() {
		_, err := client.Plain(context.Background(), &testpb.EchoRequest{Message: "hold"})
		held <- err
	}()
	select {
	case <-h.entered:
	case <-time.After(10 * time.Second):
		t.Fatal("the held call never reached the handler")
	}
	if n := g.Shedder().InFlight(); n != 1 {
		t.Fatalf("in flight while held = %d, want 1", n)
	}
	_, err = client.Plain(context.Background(), &testpb.EchoRequest{Message: strings.Repeat("x", 64<<10)})
	if st := status.Convert(err); st.Code() != codes.Unavailable || !strings.HasPrefix(st.Message(), "server overloaded: request shed") {
		t.Fatalf("second call: %v, want Unavailable (shed)", err)
	}
	if n := codec.decoded.Load(); n != 1 {
		t.Errorf("messages decoded = %d, want 1 (the held call's)", n)
	}
	close(h.release)
	if err := <-held; err != nil {
		t.Fatalf("held call: %v", err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for g.Shedder().InFlight() != 0 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	if n := g.Shedder().InFlight(); n != 0 {
		t.Errorf("in flight after = %d, want 0", n)
	}
}

// serveLoopback serves srv on a free loopback port until the test ends
// and returns a client connection to it (closed at the end) made with
// opts and insecure credentials.
func serveLoopback(t *testing.T, srv *grpc.Server, opts ...grpc.DialOption) *grpc.ClientConn {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(ln) //nolint:errcheck // ends at Stop
	t.Cleanup(srv.Stop)
	conn, err := grpc.NewClient(ln.Addr().String(), append(opts, grpc.WithTransportCredentials(insecure.NewCredentials()))...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}
