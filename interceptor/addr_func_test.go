package interceptor

import (
	"context"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/internal/seam"
	"github.com/floodgate-go/floodgate/internal/testpb"
)

// resolvedKey is where the test's "resolver" middleware (standing in for
// go-grpc-middleware's realip) leaves the address it resolved.
type resolvedKey struct{}

func resolvedAddr(ctx context.Context) (netip.Addr, bool) {
	a, ok := ctx.Value(resolvedKey{}).(netip.Addr)
	return a, ok
}

// resolver is a unary interceptor that runs before floodgate and stores
// the address named by the "test-resolved" metadata key, if any.
func resolver(ctx context.Context, req any, _ *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	if v := metadata.ValueFromIncomingContext(ctx, "test-resolved"); len(v) == 1 {
		ctx = context.WithValue(ctx, resolvedKey{}, netip.MustParseAddr(v[0]))
	}
	return handler(ctx, req)
}

func TestWithClientAddrGRPC(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		trusted []string
		md      []string
		ip      string
	}{
		{"resolved", nil, []string{"test-resolved", "203.0.113.7"}, "203.0.113.7"},
		{"resolved IPv4-mapped is unmapped", nil, []string{"test-resolved", "::ffff:203.0.113.7"}, "203.0.113.7"},
		{"resolved zone dropped", nil, []string{"test-resolved", "fe80::1%eth0"}, "fe80::1"},
		{"nothing resolved: peer", nil, nil, "127.0.0.1"},
		{"nothing resolved: untrusted XFF still ignored", nil, []string{"x-forwarded-for", "1.2.3.4"}, "127.0.0.1"},
		{"nothing resolved: trusted walk", []string{"127.0.0.1"}, []string{"x-forwarded-for", "1.2.3.4"}, "1.2.3.4"},
		{"resolved wins over the trusted walk", []string{"127.0.0.1"}, []string{"x-forwarded-for", "1.2.3.4", "test-resolved", "198.51.100.9"}, "198.51.100.9"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := &stage{}
			opt, err := seam.WithClientAddr[Option](resolvedAddr) // as module grpcmw gets it
			if err != nil {
				t.Fatal(err)
			}
			opts := []Option{opt}
			if tc.trusted != nil {
				opts = append(opts, WithTrustedProxies(tc.trusted...))
			}
			cc := startLoopback(t, &echoServer{}, []grpc.ServerOption{grpc.ChainUnaryInterceptor(resolver, mustUnary(s, opts...))})
			ctx := metadata.AppendToOutgoingContext(testCtx(t), tc.md...)
			if _, err := testpb.NewEchoClient(cc).Plain(ctx, &testpb.EchoRequest{}); err != nil {
				t.Fatal(err)
			}
			if got := s.requests()[0].Identity.IP; got != netip.MustParseAddr(tc.ip) {
				t.Errorf("IP %v, want %s", got, tc.ip)
			}
		})
	}
}

// TestWithClientAddrLaterInterceptor: an Interceptor with withClientAddr
// that is not the first of the chain decides its stage on the Request the
// first one built (the peer's address), as every stage of a call does; its
// options do not apply, and it says so.
func TestWithClientAddrLaterInterceptor(t *testing.T) {
	logs := captureSlog(t)
	first, second := &stage{}, &stage{}
	cc := startLoopback(t, &echoServer{}, []grpc.ServerOption{grpc.ChainUnaryInterceptor(
		mustUnary(first), resolver, mustUnary(second, withClientAddr(resolvedAddr)))})
	ctx := metadata.AppendToOutgoingContext(testCtx(t), "test-resolved", "203.0.113.7")
	if _, err := testpb.NewEchoClient(cc).Plain(ctx, &testpb.EchoRequest{}); err != nil {
		t.Fatal(err)
	}
	if got := first.requests()[0].Identity.IP; got != netip.MustParseAddr("127.0.0.1") {
		t.Errorf("first stage IP %v, want the peer", got)
	}
	if second.requests()[0] != first.requests()[0] {
		t.Errorf("second stage decided on a Request of its own (IP %v)", second.requests()[0].Identity.IP)
	}
	if !strings.Contains(logs.String(), "request options do not apply") {
		t.Errorf("no warning; log:\n%s", logs.String())
	}
}

func TestWithClientAddrHTTP(t *testing.T) {
	t.Parallel()
	s := &stage{}
	h := mustHTTP(s, withClientAddr(resolvedAddr), WithRoute(func(r *http.Request) string { return r.URL.Path }))(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	resolve := func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if v := r.Header.Get("Test-Resolved"); v != "" {
				r = r.WithContext(context.WithValue(r.Context(), resolvedKey{}, netip.MustParseAddr(v)))
			}
			next.ServeHTTP(w, r)
		})
	}
	for _, tc := range []struct{ header, want string }{{"2001:db8::7", "2001:db8::7"}, {"", "192.0.2.1"}} {
		req := httptest.NewRequest("GET", "/x", nil) // RemoteAddr 192.0.2.1:1234
		if tc.header != "" {
			req.Header.Set("Test-Resolved", tc.header)
		}
		rec := httptest.NewRecorder()
		resolve(h).ServeHTTP(rec, req)
		rs := s.requests()
		if got := rs[len(rs)-1].Identity.IP; got != netip.MustParseAddr(tc.want) {
			t.Errorf("header %q: IP %v, want %s", tc.header, got, tc.want)
		}
	}
}

func TestWithClientAddrNil(t *testing.T) {
	t.Parallel()
	_, err := New(withClientAddr(nil))
	if err == nil || !strings.Contains(err.Error(), "interceptor: client address func is nil") {
		t.Fatalf("New(withClientAddr(nil)) = %v", err)
	}
	if _, err := seam.WithClientAddr[int](resolvedAddr); err == nil {
		t.Error("seam.WithClientAddr[int] = nil error")
	}
}

// TestInStreamMessage: as module grpcmw reads it (seam.InStreamMessage), the decision as a stream opens is not marked, the
// per-message decisions are, and unary calls never are.
func TestInStreamMessage(t *testing.T) {
	t.Parallel()
	var (
		mu   sync.Mutex
		seen []bool
	)
	obs := floodgate.ObserverFunc(func(ctx context.Context, _ *floodgate.Request, _ floodgate.Decision, _ error) {
		mu.Lock()
		seen = append(seen, seam.InStreamMessage(ctx))
		mu.Unlock()
	})
	fg := MustNew(WithPerMessage(), WithObserver(obs))
	cc := startBufconn(t, &echoServer{}, []grpc.ServerOption{
		grpc.ChainUnaryInterceptor(fg.UnaryServer(&stage{})),
		grpc.ChainStreamInterceptor(fg.StreamServer(&stage{})),
	})
	c := testpb.NewEchoClient(cc)
	if _, err := c.Plain(testCtx(t), &testpb.EchoRequest{}); err != nil {
		t.Fatal(err)
	}
	bs, err := c.Bidi(testCtx(t))
	if err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if err := bs.Send(&testpb.EchoRequest{Message: "m"}); err != nil {
			t.Fatal(err)
		}
		if _, err := bs.Recv(); err != nil {
			t.Fatal(err)
		}
	}
	if err := bs.CloseSend(); err != nil {
		t.Fatal(err)
	}
	for range 10 {
		if _, err := bs.Recv(); err != nil {
			break
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if want := []bool{false, false, true, true}; !slices.Equal(seen, want) {
		t.Errorf("seam.InStreamMessage per decision = %v, want %v (unary, stream open, 2 messages)", seen, want)
	}
	if seam.InStreamMessage(context.Background()) {
		t.Error("seam.InStreamMessage(Background) = true")
	}
}
