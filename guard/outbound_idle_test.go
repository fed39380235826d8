package guard

import (
	"context"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/floodgate-go/floodgate/internal/testpb"
)

// noOutbound is a policy without an outbound: section.
const noOutbound = "rules:\n  - {name: r, key: [ip], rate: 100/1s}\n"

// withOutbound adds an outbound rule of one call an hour on Echo/Plain.
const withOutbound = noOutbound + `outbound:
  rules:
    - {name: plain-out, match: {method: /floodgate.test.v1.Echo/Plain}, rate: 1/1h}
`

// TestOutboundIdleFollowsReload: through DialOptions, a policy without an
// outbound: section sends every call; a reload that adds an outbound rule
// applies it at the next calls (one sent, the next refused before it is
// sent), and a reload that removes it sends every call again.
func TestOutboundIdleFollowsReload(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "policy.yaml")
	write := func(policy string) {
		t.Helper()
		if err := os.WriteFile(path+".tmp", []byte(policy), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(path+".tmp", path); err != nil {
			t.Fatal(err)
		}
	}
	write(noOutbound)
	g, err := New(context.Background(), WithInProcess(), WithLogger(quiet), WithPolicyFile(path), WithPolicyInterval(10*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { g.Close(context.Background()) }) // after the server stops (serveLoopback)
	srv := grpc.NewServer()
	testpb.RegisterEchoServer(srv, echo{})
	client := testpb.NewEchoClient(serveLoopback(t, srv, g.DialOptions()...))
	call := func() codes.Code {
		_, err := client.Plain(context.Background(), &testpb.EchoRequest{Message: "hi"})
		return status.Code(err)
	}
	for range 3 {
		if c := call(); c != codes.OK {
			t.Fatalf("without an outbound: section: %v, want OK", c)
		}
	}
	// until reload: the rule admits its one call of the hour, then refuses
	write(withOutbound)
	waitFor(t, "the outbound rule to apply", func() bool { return call() == codes.ResourceExhausted })
	write(noOutbound)
	waitFor(t, "the outbound rule to go", func() bool { return call() == codes.OK })
	for range 3 {
		if c := call(); c != codes.OK {
			t.Fatalf("after the outbound: section went: %v, want OK", c)
		}
	}
}

// roundTrip answers every request with res, without a network and
// without allocating.
type roundTrip struct{ res *http.Response }

func (t roundTrip) RoundTrip(*http.Request) (*http.Response, error) { return t.res, nil }

// TestOutboundIdleAllocatesNothing: while the policy has no outbound:
// section, an outgoing gRPC call and an outgoing HTTP request pass the
// outbound stages without being described to them (7 allocations per
// call before), and with the section they are admitted.
func TestOutboundIdleAllocatesNothing(t *testing.T) {
	if raceEnabled {
		t.Skip("-race allocates")
	}
	invoke := func(context.Context, string, any, any, *grpc.ClientConn, ...grpc.CallOption) error { return nil }
	ctx := metadata.AppendToOutgoingContext(context.Background(), "x-a", "1")
	req, err := http.NewRequest(http.MethodGet, "http://vendor.example/v1/chat", nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		policy string
		allocs bool
	}{{noOutbound, false}, {withOutbound, true}} {
		g, err := New(context.Background(), WithInProcess(), WithLogger(quiet), WithPolicy([]byte(tc.policy)))
		if err != nil {
			t.Fatal(err)
		}
		unary, rt := g.unaryOutbound(), g.RoundTripper(roundTrip{&http.Response{StatusCode: http.StatusOK, Body: http.NoBody}})
		grpcAllocs := testing.AllocsPerRun(100, func() {
			_ = unary(ctx, "/svc.v1.Other/Get", nil, nil, nil, invoke)
		})
		httpAllocs := testing.AllocsPerRun(100, func() {
			if res, err := rt.RoundTrip(req); err == nil {
				_, _ = io.Copy(io.Discard, res.Body)
			}
		})
		g.Close(context.Background())
		section, want := "without", "none"
		if tc.allocs {
			section, want = "with", "some (the call admitted)"
		}
		if (grpcAllocs > 0) != tc.allocs || (httpAllocs > 0) != tc.allocs {
			t.Errorf("%s an outbound: section: %v allocations per gRPC call, %v per HTTP request; want %s", section, grpcAllocs, httpAllocs, want)
		}
	}
}

// BenchmarkOutbound measures an outgoing unary call's way through the
// outbound stages (the invoker does nothing): under a policy without an
// outbound: section ("idle") and under one whose outbound rule matches
// another method ("rules").
//
//	go test -run '^$' -bench Outbound -benchmem ./guard
func BenchmarkOutbound(b *testing.B) {
	invoke := func(context.Context, string, any, any, *grpc.ClientConn, ...grpc.CallOption) error { return nil }
	ctx := metadata.AppendToOutgoingContext(context.Background(), "x-a", "1")
	for _, v := range []struct{ name, policy string }{{"idle", noOutbound}, {"rules", withOutbound}} {
		b.Run(v.name, func(b *testing.B) {
			g, err := New(context.Background(), WithInProcess(), WithLogger(quiet), WithPolicy([]byte(v.policy)))
			if err != nil {
				b.Fatal(err)
			}
			defer g.Close(context.Background())
			unary := g.unaryOutbound()
			b.ReportAllocs()
			for b.Loop() {
				if err := unary(ctx, "/svc.v1.Other/Get", nil, nil, nil, invoke); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
