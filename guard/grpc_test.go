package guard

import (
	"bytes"
	"context"
	"log/slog"
	"net"
	"strings"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
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
	defer g.Close(context.Background())
	srv := grpc.NewServer(g.ServerOptions()...)
	testpb.RegisterEchoServer(srv, echo{})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(ln) //nolint:errcheck // ends at Stop
	defer srv.Stop()
	conn, err := grpc.NewClient(ln.Addr().String(), append(g.DialOptions(), grpc.WithTransportCredentials(insecure.NewCredentials()))...)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
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
