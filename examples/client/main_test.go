package main

import (
	"context"
	"log/slog"
	"net"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"google.golang.org/grpc"

	"github.com/floodgate-go/floodgate/examples/internal/exampletest"
	"github.com/floodgate-go/floodgate/guard"
	"github.com/floodgate-go/floodgate/interceptor"
	"github.com/floodgate-go/floodgate/internal/shoppb"
)

// startServer serves Shop.Search behind the same chain and policy as
// examples/grpc, built by guard (a test cannot import a main package;
// examples/grpc's own test covers that program), and returns its address.
func startServer(t *testing.T) string {
	t.Helper()
	g, err := guard.New(t.Context(), guard.WithPolicyFile("../policy.yaml"), guard.WithInProcess(),
		guard.WithLogger(slog.New(slog.DiscardHandler)),
		guard.WithInterceptor(
			interceptor.WithUser(interceptor.FromHeader("x-user")),
			interceptor.WithTenant(interceptor.FromHeader("x-tenant")),
			interceptor.WithTier(interceptor.FromHeader("x-tier")),
		))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { g.Close(context.Background()) })
	srv := grpc.NewServer(g.ServerOptions()...)
	shoppb.RegisterShopServer(srv, search{})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(ln)
	t.Cleanup(srv.Stop)
	return ln.Addr().String()
}

type search struct{ shoppb.UnimplementedShopServer }

func (search) Search(context.Context, *shoppb.SearchRequest) (*shoppb.SearchReply, error) {
	return &shoppb.SearchReply{Items: []string{"lamp"}}, nil
}

var summary = regexp.MustCompile(`(\d+) calls in \S+: (\d+) ok, (\d+) needed a retry, (\d+) failed`)

func TestClientHonoursPushback(t *testing.T) {
	addr := startServer(t)
	out := exampletest.NewOutput()
	// grpc-search-user allows 5 in a burst, then one every 200ms: calls 6..8
	// are denied at first and succeed once the client waited.
	if err := run(t.Context(), []string{"-addr", addr, "-n", "8", "-attempts", "4"}, out); err != nil {
		t.Fatalf("run: %v\n%s", err, out)
	}
	m := summary.FindStringSubmatch(out.String())
	if m == nil || m[1] != "8" || m[2] != "8" || m[4] != "0" {
		t.Fatalf("summary %q, want 8 calls, 8 ok, 0 failed; output:\n%s", m, out)
	}
	if retried, _ := strconv.Atoi(m[3]); retried < 1 {
		t.Errorf("no call needed a retry; output:\n%s", out)
	}
	if !regexp.MustCompile(`ResourceExhausted, server asks to wait \d+(\.\d+)?ms; waited \d+ms; ok after 2 attempt`).MatchString(out.String()) {
		t.Errorf("no retried call shown; output:\n%s", out)
	}
}

func TestClientWithoutRetriesFails(t *testing.T) {
	addr := startServer(t)
	out := exampletest.NewOutput()
	err := run(t.Context(), []string{"-addr", addr, "-n", "8", "-attempts", "1", "-user", "erin"}, out)
	if err == nil || !strings.Contains(err.Error(), "calls failed") {
		t.Fatalf("run with one attempt per call: err = %v\n%s", err, out)
	}
	if !strings.Contains(out.String(), "FAILED after 1 attempt(s): rpc error: code = ResourceExhausted") {
		t.Errorf("output lacks the denial:\n%s", out)
	}
}

func TestClientBadFlags(t *testing.T) {
	for _, args := range [][]string{{"-n", "0"}, {"-n", "1001"}, {"-timeout", "0s"}, {"stray"}} {
		err := run(t.Context(), args, exampletest.NewOutput())
		if err == nil || !strings.Contains(err.Error(), args[len(args)-1]) {
			t.Errorf("run %q: err = %v, want one naming %q", args, err, args[len(args)-1])
		}
	}
}
