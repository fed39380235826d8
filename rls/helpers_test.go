package rls_test

import (
	"context"
	"io"
	"log/slog"
	"net"
	"os"
	"testing"
	"time"

	extrlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/floodgate-go/floodgate/quota"
	"github.com/floodgate-go/floodgate/rls"
	"github.com/floodgate-go/floodgate/testing/clock"
	"github.com/floodgate-go/floodgate/tiers"
	"github.com/floodgate-go/floodgate/tiers/memstore"
	"github.com/floodgate-go/floodgate/tiers/redisstore"
)

// quiet is a logger that drops everything.
var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// TestMain keeps the expected warnings (rules failing open over a store
// without fallback, a killed Redis) out of the test output.
func TestMain(m *testing.M) {
	slog.SetDefault(quiet)
	redisstore.SetRedisLogger(quiet, slog.LevelError)
	os.Exit(m.Run())
}

// env is a Server on a real gRPC server on a loopback port and a client
// of it.
type env struct {
	clk     *clock.Fake
	limiter *tiers.Limiter
	client  rlsv3.RateLimitServiceClient
	conn    *grpc.ClientConn
}

// newEnv serves policy from an in-process store on fake time.
func newEnv(t *testing.T, policy string, opts ...rls.Option) *env {
	t.Helper()
	clk := clock.New(time.Time{})
	store, err := memstore.New(memstore.WithClock(clk))
	if err != nil {
		t.Fatal(err)
	}
	return newEnvStore(t, policy, store, clk, opts...)
}

// newEnvStore serves policy from store.
func newEnvStore(t *testing.T, policy string, store quota.Store, clk *clock.Fake, opts ...rls.Option) *env {
	t.Helper()
	p, err := tiers.Load([]byte(policy))
	if err != nil {
		t.Fatal(err)
	}
	l, err := tiers.NewLimiter(store, p)
	if err != nil {
		t.Fatal(err)
	}
	e := &env{clk: clk, limiter: l}
	srv, err := rls.New(l, append([]rls.Option{rls.WithLogger(quiet)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	g := grpc.NewServer()
	srv.Register(g)
	e.conn, e.client = serve(t, g)
	return e
}

// serve serves g on a loopback port until the test ends and returns a
// client connection and an RLS client of it.
func serve(t *testing.T, g *grpc.Server) (*grpc.ClientConn, rlsv3.RateLimitServiceClient) {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = g.Serve(lis) }()
	t.Cleanup(g.Stop)
	conn := dial(t, lis.Addr().String())
	return conn, rlsv3.NewRateLimitServiceClient(conn)
}

func dial(t *testing.T, addr string) *grpc.ClientConn {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return conn
}

// ctxT is a context bounded by the test's deadline and 30 seconds.
func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// d builds a descriptor as Envoy sends one: its entries in order.
func d(kv ...string) *extrlsv3.RateLimitDescriptor {
	out := &extrlsv3.RateLimitDescriptor{}
	for i := 0; i+1 < len(kv); i += 2 {
		out.Entries = append(out.Entries, &extrlsv3.RateLimitDescriptor_Entry{Key: kv[i], Value: kv[i+1]})
	}
	return out
}

// hits sets a descriptor's own hits_addend (newer Envoy).
func hits(desc *extrlsv3.RateLimitDescriptor, n uint64) *extrlsv3.RateLimitDescriptor {
	desc.HitsAddend = wrapperspb.UInt64(n)
	return desc
}

func (e *env) call(t *testing.T, domain string, hitsAddend uint32, descs ...*extrlsv3.RateLimitDescriptor) *rlsv3.RateLimitResponse {
	t.Helper()
	resp, err := e.client.ShouldRateLimit(ctxT(t), &rlsv3.RateLimitRequest{Domain: domain, Descriptors: descs, HitsAddend: hitsAddend})
	if err != nil {
		t.Fatalf("ShouldRateLimit: %v", err)
	}
	if len(resp.Statuses) != len(descs) {
		t.Fatalf("%d statuses for %d descriptors", len(resp.Statuses), len(descs))
	}
	return resp
}

// header returns the value of response header key, or "".
func header(resp *rlsv3.RateLimitResponse, key string) string {
	for _, h := range resp.ResponseHeadersToAdd {
		if h.Key == key {
			return h.Value
		}
	}
	return ""
}

// remaining returns a descriptor's limit_remaining, checking its code.
func remaining(t *testing.T, resp *rlsv3.RateLimitResponse, i int, want rlsv3.RateLimitResponse_Code) uint32 {
	t.Helper()
	st := resp.Statuses[i]
	if st.Code != want {
		t.Fatalf("descriptor %d: code %v, want %v (%v)", i, st.Code, want, st)
	}
	return st.LimitRemaining
}
