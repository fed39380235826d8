package interceptor

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/internal/testpb"
	"github.com/floodgate-go/floodgate/testing/clock"
)

const softPolicy = `
rules:
  - {name: plan, key: [tenant], rate: 2/1m, soft: true}
  - {name: per-tenant, key: [tenant], rate: 100/1m}
`

// handlerSaw records what the handler read from its context
// (floodgate.Request.SoftExceeded), call after call.
type handlerSaw struct {
	mu  sync.Mutex
	got []string
}

func (h *handlerSaw) read(ctx context.Context) {
	r, ok := floodgate.FromContext(ctx)
	h.mu.Lock()
	defer h.mu.Unlock()
	if !ok {
		h.got = append(h.got, "<no request>")
		return
	}
	h.got = append(h.got, r.SoftExceeded)
}

func (h *handlerSaw) last() string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.got[len(h.got)-1]
}

// An HTTP call over a soft rule is admitted (200) with the mark in
// X-RateLimit-Soft-Exceeded and in the handler's Request; the calls
// within it carry no mark, and the RateLimit fields describe the hard
// rule.
func TestSoftHTTP(t *testing.T) {
	t.Parallel()
	l, _ := shapingLimiter(t, clock.New(time.Time{}), softPolicy)
	saw := &handlerSaw{}
	h := MustNew(WithTenant(FromHeader("x-tenant")), WithRoute(func(*http.Request) string { return "GET /v1/complete" })).
		HTTP(l)(http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) { saw.read(r.Context()) }))
	for i, want := range []string{"", "", `"plan"`, `"plan"`} {
		req := httptest.NewRequest("GET", "/v1/complete", nil)
		req.Header.Set("x-tenant", "acme")
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if rec.Code != http.StatusOK || rec.Header().Get("X-RateLimit-Soft-Exceeded") != want {
			t.Fatalf("call %d: %d, X-RateLimit-Soft-Exceeded %q, want 200 and %q", i+1, rec.Code, rec.Header().Get("X-RateLimit-Soft-Exceeded"), want)
		}
		if wantSaw := map[bool]string{true: "plan", false: ""}[want != ""]; saw.last() != wantSaw {
			t.Fatalf("call %d: handler read %q, want %q", i+1, saw.last(), wantSaw)
		}
		if rl := rec.Header().Get("RateLimit-Policy"); rl != `"per-tenant";q=100;w=60` {
			t.Fatalf("call %d: RateLimit-Policy %q", i+1, rl)
		}
	}
}

// A gRPC call over a soft rule, unary and stream, is admitted with the
// mark in its response header metadata and in the handler's Request.
func TestSoftGRPC(t *testing.T) {
	t.Parallel()
	l, _ := shapingLimiter(t, clock.New(time.Time{}), softPolicy)
	fg := MustNew(WithTenant(FromHeader("x-tenant")))
	saw := &handlerSaw{}
	cc := startBufconn(t, &echoServer{}, []grpc.ServerOption{
		grpc.ChainUnaryInterceptor(fg.UnaryServer(l), func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
			saw.read(ctx)
			return h(ctx, req)
		}),
		grpc.ChainStreamInterceptor(fg.StreamServer(l), func(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, h grpc.StreamHandler) error {
			saw.read(ss.Context())
			return h(srv, ss)
		}),
	})
	c := testpb.NewEchoClient(cc)
	ctx := metadata.AppendToOutgoingContext(testCtx(t), "x-tenant", "acme")
	unary := func() metadata.MD {
		var md metadata.MD
		if _, err := c.Plain(ctx, &testpb.EchoRequest{Message: "x"}, grpc.Header(&md)); err != nil {
			t.Fatal(err)
		}
		return md
	}
	stream := func() metadata.MD {
		st, err := c.ServerStream(ctx, &testpb.EchoRequest{Message: "s"})
		if err != nil {
			t.Fatal(err)
		}
		md, err := st.Header()
		if err != nil {
			t.Fatal(err)
		}
		for range 3 {
			if _, err := st.Recv(); err != nil {
				t.Fatal(err)
			}
		}
		return md
	}
	for i, tc := range []struct {
		call func() metadata.MD
		want string
	}{{unary, ""}, {stream, ""}, {unary, `"plan"`}, {stream, `"plan"`}} {
		md := tc.call()
		got := md.Get("x-ratelimit-soft-exceeded")
		if tc.want == "" && len(got) != 0 || tc.want != "" && (len(got) != 1 || got[0] != tc.want) {
			t.Fatalf("call %d: x-ratelimit-soft-exceeded %q, want %q", i+1, got, tc.want)
		}
		if wantSaw := map[bool]string{true: "plan", false: ""}[tc.want != ""]; saw.last() != wantSaw {
			t.Fatalf("call %d: handler read %q, want %q", i+1, saw.last(), wantSaw)
		}
	}
}

func TestSoftValue(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"plan":                `"plan"`,
		"plan,tenant-plan/1h": `"plan", "tenant-plan/1h"`,
		"bad\x01":             "",
	} {
		if got := softValue(in); got != want {
			t.Errorf("softValue(%q) = %q, want %q", in, got, want)
		}
	}
}
