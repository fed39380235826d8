package grpcmw_test

import (
	"context"
	"net"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors"
	"github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors/logging"
	"github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors/ratelimit"
	"github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors/realip"
	"github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors/recovery"
	"github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors/selector"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/concurrency"
	"github.com/floodgate-go/floodgate/grpcmw"
	"github.com/floodgate-go/floodgate/interceptor"
	"github.com/floodgate-go/floodgate/internal/shoppb"
	"github.com/floodgate-go/floodgate/shedder"
	"github.com/floodgate-go/floodgate/testing/clock"
	"github.com/floodgate-go/floodgate/tiers"
	"github.com/floodgate-go/floodgate/tiers/memstore"
)

// shop answers every call; a Search for "panic" panics, for recovery.
type shop struct{ shoppb.UnimplementedShopServer }

func (shop) Search(_ context.Context, req *shoppb.SearchRequest) (*shoppb.SearchReply, error) {
	if req.GetQuery() == "panic" {
		panic("search exploded")
	}
	return &shoppb.SearchReply{Items: []string{req.GetQuery()}}, nil
}

func (shop) Pay(context.Context, *shoppb.PayRequest) (*shoppb.PayReply, error) {
	return &shoppb.PayReply{PaymentId: "p1"}, nil
}

func (shop) ListItems(_ *shoppb.ListItemsRequest, s grpc.ServerStreamingServer[shoppb.Item]) error {
	return s.Send(&shoppb.Item{Id: "1"})
}

// logLines collects what the logging interceptor writes.
type logLines struct {
	mu    sync.Mutex
	lines []map[string]any
}

func (l *logLines) logger() logging.Logger {
	return logging.LoggerFunc(func(_ context.Context, _ logging.Level, msg string, fields ...any) {
		m := map[string]any{"msg": msg}
		for i := 0; i+1 < len(fields); i += 2 {
			m[fields[i].(string)] = fields[i+1]
		}
		l.mu.Lock()
		l.lines = append(l.lines, m)
		l.mu.Unlock()
	})
}

// lastFinished returns the fields of the last "finished call" line of
// method (the logging interceptor writes it before the reply is sent).
func (l *logLines) lastFinished(t *testing.T, method string) map[string]any {
	t.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	for i := len(l.lines) - 1; i >= 0; i-- {
		if m := l.lines[i]; m["msg"] == "finished call" && m[logging.MethodFieldKey] == method {
			return m
		}
	}
	t.Fatalf("no finished call line for %s", method)
	return nil
}

// limiter is a tiers.Limiter of the policy yaml over a memstore on a
// fake clock that never moves: its counts are exact however long the
// test takes.
func limiter(t *testing.T, yaml string) *tiers.Limiter {
	t.Helper()
	policy, err := tiers.Load([]byte(yaml))
	if err != nil {
		t.Fatal(err)
	}
	store, err := memstore.New(memstore.WithClock(clock.New(time.Time{})))
	if err != nil {
		t.Fatal(err)
	}
	l, err := tiers.NewLimiter(store, policy)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// serve starts srv on 127.0.0.1 and returns a client connection to it.
func serve(t *testing.T, srv *grpc.Server) shoppb.ShopClient {
	t.Helper()
	shoppb.RegisterShopServer(srv, shop{})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(srv.Stop)
	conn, err := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return shoppb.NewShopClient(conn)
}

// from is a call as a trusted proxy on 127.0.0.1 forwards it for client.
func from(ctx context.Context, client string) context.Context {
	return metadata.AppendToOutgoingContext(ctx, "x-forwarded-for", client)
}

var proxies = []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")}

func realIP() (grpc.UnaryServerInterceptor, grpc.StreamServerInterceptor) {
	opts := []realip.Option{realip.WithTrustedPeers(proxies), realip.WithHeaders([]string{realip.XForwardedFor})}
	return realip.UnaryServerInterceptorOpts(opts...), realip.StreamServerInterceptorOpts(opts...)
}

const (
	searchMethod = "/floodgate.shop.v1.Shop/Search"
	payMethod    = "/floodgate.shop.v1.Shop/Pay"
	listMethod   = "/floodgate.shop.v1.Shop/ListItems"
)

// TestMiddlewareChain runs go-grpc-middleware v2's logging, realip,
// selector and recovery with floodgate's interceptors over a real gRPC
// connection on loopback, the client calling through a trusted proxy
// (127.0.0.1) that forwards X-Forwarded-For.
func TestMiddlewareChain(t *testing.T) {
	t.Parallel()
	limits := limiter(t, `
rules:
  - name: per-ip
    key: [ip]
    rate: 3/1m
    burst: 3
`)
	fg, err := interceptor.New(grpcmw.WithRealIP(), grpcmw.WithLogFields())
	if err != nil {
		t.Fatal(err)
	}
	exempt := grpcmw.MustExempt(payMethod)
	var logs logLines
	realipUnary, realipStream := realIP()
	client := serve(t, grpc.NewServer(
		grpc.ChainUnaryInterceptor(
			logging.UnaryServerInterceptor(logs.logger()),
			realipUnary,
			selector.UnaryServerInterceptor(fg.UnaryServer(limits), exempt),
			recovery.UnaryServerInterceptor(recovery.WithRecoveryHandler(internalError)),
		),
		grpc.ChainStreamInterceptor(
			logging.StreamServerInterceptor(logs.logger()),
			realipStream,
			selector.StreamServerInterceptor(fg.StreamServer(limits), exempt),
			recovery.StreamServerInterceptor(recovery.WithRecoveryHandler(internalError)),
		),
	))
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	alice, bob := from(ctx, "203.0.113.7"), from(ctx, "198.51.100.9")

	// The IP rule counts the address realip resolved, not the proxy's:
	// alice has 3 calls, then is denied with floodgate's full status.
	for i := 1; i <= 3; i++ {
		if _, err := client.Search(alice, &shoppb.SearchRequest{Query: "lamp"}); err != nil {
			t.Fatalf("alice search %d: %v", i, err)
		}
		f := logs.lastFinished(t, "Search")
		if f[grpcmw.FieldDecision] != "allowed" || f[grpcmw.FieldPolicy] != "per-ip" || f[grpcmw.FieldRemaining] != int64(3-i) {
			t.Errorf("alice search %d: log fields %v, want allowed per-ip remaining %d", i, f, 3-i)
		}
	}
	var trailer metadata.MD
	_, err = client.Search(alice, &shoppb.SearchRequest{Query: "lamp"}, grpc.Trailer(&trailer))
	st := status.Convert(err)
	if st.Code() != codes.ResourceExhausted {
		t.Fatalf("alice search 4: %v, want RESOURCE_EXHAUSTED", err)
	}
	if !hasQuotaFailure(st, "per-ip") {
		t.Errorf("alice search 4: details %v, want a QuotaFailure naming per-ip", st.Details())
	}
	if len(trailer.Get(interceptor.PushbackTrailer)) != 1 {
		t.Errorf("alice search 4: trailer %v, want %s", trailer, interceptor.PushbackTrailer)
	}
	f := logs.lastFinished(t, "Search")
	if f[grpcmw.FieldDecision] != "limited" || f[grpcmw.FieldPolicy] != "per-ip" || f[grpcmw.FieldStage] != "tiers" ||
		f[grpcmw.FieldSource] != "store" || f[grpcmw.FieldRemaining] != int64(0) || f[grpcmw.FieldLimit] != int64(3) ||
		f["grpc.code"] != "ResourceExhausted" {
		t.Errorf("denied search: log fields %v", f)
	}
	if ra, _ := f[grpcmw.FieldRetryAfter].(float64); ra <= 0 || ra > 20 {
		t.Errorf("denied search: %s = %v, want (0, 20] seconds", grpcmw.FieldRetryAfter, f[grpcmw.FieldRetryAfter])
	}
	for _, k := range []string{"floodgate.ip", "floodgate.user"} {
		if _, ok := f[k]; ok {
			t.Errorf("log fields carry identity %s", k)
		}
	}

	// bob comes through the same proxy connection but is another client.
	if _, err := client.Search(bob, &shoppb.SearchRequest{Query: "desk"}); err != nil {
		t.Errorf("bob search: %v, want ok (own address, own bucket)", err)
	}

	// The selector keeps Pay away from floodgate: alice, over her limit,
	// pays as often as she likes, and the log line carries no decision.
	for i := 1; i <= 10; i++ {
		if _, err := client.Pay(alice, &shoppb.PayRequest{AmountCents: 100}); err != nil {
			t.Fatalf("exempt pay %d: %v", i, err)
		}
	}
	if f := logs.lastFinished(t, "Pay"); f[grpcmw.FieldDecision] != nil {
		t.Errorf("exempt pay logged a decision: %v", f)
	}

	// Streams: the same chain, the same address, the same rule.
	ls, err := client.ListItems(alice, &shoppb.ListItemsRequest{Limit: 1})
	if err == nil {
		_, err = ls.Recv()
	}
	if status.Code(err) != codes.ResourceExhausted {
		t.Errorf("alice stream: %v, want RESOURCE_EXHAUSTED", err)
	}
	if f := logs.lastFinished(t, "ListItems"); f[grpcmw.FieldDecision] != "limited" || f["grpc.code"] != "ResourceExhausted" {
		t.Errorf("denied stream: log fields %v", f)
	}

	// Recovery, innermost, turns a handler panic into INTERNAL after
	// floodgate admitted the call; logging sees both.
	carol := from(ctx, "192.0.2.44")
	if _, err := client.Search(carol, &shoppb.SearchRequest{Query: "panic"}); status.Code(err) != codes.Internal {
		t.Errorf("panicking search: %v, want INTERNAL", err)
	}
	if f := logs.lastFinished(t, "Search"); f[grpcmw.FieldDecision] != "allowed" || f["grpc.code"] != "Internal" {
		t.Errorf("panicking search: log fields %v", f)
	}
}

// internalError is what recovery answers for a panic: INTERNAL, without
// the panic's text.
func internalError(any) error { return status.Error(codes.Internal, "internal error") }

func hasQuotaFailure(st *status.Status, policy string) bool {
	for _, d := range st.Details() {
		if q, ok := d.(*errdetails.QuotaFailure); ok && len(q.GetViolations()) == 1 && q.GetViolations()[0].GetQuotaId() == policy {
			return true
		}
	}
	return false
}

// TestLimiterAdapter runs floodgate through go-grpc-middleware's ratelimit
// interceptors, behind realip, over loopback: it denies, with the status
// details lost and the pushback trailer kept.
func TestLimiterAdapter(t *testing.T) {
	t.Parallel()
	limits := limiter(t, `
rules:
  - name: per-ip
    key: [ip]
    rate: 2/1m
    burst: 2
`)
	lim, err := grpcmw.NewLimiter(mustInterceptor(grpcmw.WithRealIP()), limits)
	if err != nil {
		t.Fatal(err)
	}
	realipUnary, realipStream := realIP()
	client := serve(t, grpc.NewServer(
		grpc.ChainUnaryInterceptor(realipUnary, ratelimit.UnaryServerInterceptor(lim)),
		grpc.ChainStreamInterceptor(realipStream, ratelimit.StreamServerInterceptor(lim)),
	))
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	alice := from(ctx, "203.0.113.7")
	for i := 1; i <= 2; i++ {
		if _, err := client.Search(alice, &shoppb.SearchRequest{Query: "lamp"}); err != nil {
			t.Fatalf("search %d: %v", i, err)
		}
	}
	var trailer metadata.MD
	_, err = client.Search(alice, &shoppb.SearchRequest{Query: "lamp"}, grpc.Trailer(&trailer))
	st := status.Convert(err)
	if st.Code() != codes.ResourceExhausted || !strings.Contains(st.Message(), "grpc_ratelimit middleware") ||
		!strings.Contains(st.Message(), `policy "per-ip"`) {
		t.Fatalf("search 3: %v, want RESOURCE_EXHAUSTED from the ratelimit interceptor naming per-ip", err)
	}
	if len(st.Details()) != 0 {
		t.Errorf("search 3: details %v; the ratelimit interceptor was expected to drop them (update the docs)", st.Details())
	}
	if got := trailer.Get(interceptor.PushbackTrailer); len(got) != 1 || got[0] == "-1" {
		t.Errorf("search 3: pushback trailer %q, want a delay", got)
	}
	ls, err := client.ListItems(alice, &shoppb.ListItemsRequest{Limit: 1})
	if err == nil {
		_, err = ls.Recv()
	}
	if status.Code(err) != codes.ResourceExhausted {
		t.Errorf("stream: %v, want RESOURCE_EXHAUSTED", err)
	}
	// Another client behind the same proxy is not limited by alice's calls,
	// and the stages were released: nothing is held after a call.
	if _, err := client.Search(from(ctx, "198.51.100.9"), &shoppb.SearchRequest{Query: "desk"}); err != nil {
		t.Errorf("bob: %v", err)
	}
}

// TestLimiterSharesTheRequest: a shedder behind floodgate's interceptor and
// the rate limits behind the ratelimit interceptor, both from one
// Interceptor, decide on one Request, with the cost and priority of the
// limiter's policy (methods:), which the shedder's interceptor knows
// because NewLimiter made the limiter's interceptor from the same one.
func TestLimiterSharesTheRequest(t *testing.T) {
	t.Parallel()
	limits := limiter(t, `
rules:
  - {name: per-ip, key: [ip], rate: 100/1m}
methods:
  /floodgate.shop.v1.Shop/Search: {cost: 4, priority: critical}
`)
	var (
		mu   sync.Mutex
		seen []*floodgate.Request
	)
	shed := floodgate.AdmitFunc(func(_ context.Context, r *floodgate.Request) (floodgate.Decision, floodgate.Done, error) {
		mu.Lock()
		seen = append(seen, r)
		mu.Unlock()
		return floodgate.Decision{Allowed: true, Stage: floodgate.StageShedder}, nil, nil
	})
	var limited []*floodgate.Request
	fg := mustInterceptor(interceptor.WithObserver(floodgate.ObserverFunc(func(_ context.Context, r *floodgate.Request, d floodgate.Decision, _ error) {
		if d.Stage == floodgate.StageTiers {
			mu.Lock()
			limited = append(limited, r)
			mu.Unlock()
		}
	})))
	shedUnary := fg.UnaryServer(shed)
	lim, err := grpcmw.NewLimiter(fg, limits)
	if err != nil {
		t.Fatal(err)
	}
	client := serve(t, grpc.NewServer(grpc.ChainUnaryInterceptor(shedUnary, ratelimit.UnaryServerInterceptor(lim))))
	if _, err := client.Search(t.Context(), &shoppb.SearchRequest{Query: "lamp"}); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(seen) != 1 || len(limited) != 1 || seen[0] != limited[0] {
		t.Fatalf("shedder saw %d requests, limiter %d; want the same one", len(seen), len(limited))
	}
	if r := seen[0]; r.Cost != 4 || r.Priority != floodgate.PriorityCritical {
		t.Errorf("shedder and limiter saw cost %d priority %v, want the policy's 4 and critical", r.Cost, r.Priority)
	}
}

func TestLimiterOutsideServerCall(t *testing.T) {
	t.Parallel()
	lim, err := grpcmw.NewLimiter(mustInterceptor(), limiter(t, "rules:\n  - {name: r, key: [ip], rate: 1/1s}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if err := lim.Limit(context.Background()); err == nil || !strings.Contains(err.Error(), "not a gRPC server call") {
		t.Errorf("Limit(Background) = %v, want the misuse named", err)
	}
}

// unwrapper is a user's wrapper of a stage that follows floodgate's unwrap
// convention.
type unwrapper struct{ floodgate.Admitter }

func (u unwrapper) Unwrap() floodgate.Admitter { return u.Admitter }

func TestNewLimiterErrors(t *testing.T) {
	t.Parallel()
	shed, err := shedder.New(10)
	if err != nil {
		t.Fatal(err)
	}
	conc, err := concurrency.New(concurrency.WithGlobal(10))
	if err != nil {
		t.Fatal(err)
	}
	limits := limiter(t, "rules:\n  - {name: r, key: [ip], rate: 1/1s}\n")
	for _, tc := range []struct {
		name string
		a    floodgate.Admitter
		opts []interceptor.Option
		want []string
	}{
		{"nil", nil, nil, []string{"grpcmw: NewLimiter: nil Admitter"}},
		{"shedder", shed, nil, []string{"*shedder.Shedder holds a slot"}},
		{"wrapped shedder", unwrapper{shed}, nil, []string{"*shedder.Shedder holds a slot"}},
		{"chain", floodgate.Chain{conc, limits, nil}, nil, []string{"*concurrency.Limiter holds a slot", "nil stage in Chain"}},
		{"nil Interceptor", limits, nil, []string{"grpcmw: NewLimiter: nil Interceptor"}},
		{"rule that can never apply", limiter(t, "rules:\n  - {name: per-user, key: [user], rate: 1/1s}\n"),
			[]interceptor.Option{interceptor.WithStrictIdentity()}, []string{"grpcmw: NewLimiter: interceptor: WithStrictIdentity", "per-user"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var fg *interceptor.Interceptor
			if tc.name != "nil Interceptor" {
				fg = mustInterceptor(tc.opts...)
			}
			l, err := grpcmw.NewLimiter(fg, tc.a)
			if l != nil || err == nil {
				t.Fatalf("NewLimiter = %v, %v; want an error", l, err)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not name %q", err, w)
				}
			}
		})
	}
}

func TestExempt(t *testing.T) {
	t.Parallel()
	m, err := grpcmw.Exempt("/a.v1.A/Get", "/b.v1.B/*")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		method string
		match  bool // true: floodgate sees the call
	}{
		{"/a.v1.A/Get", false},
		{"/a.v1.A/Put", true},
		{"/b.v1.B/Anything", false},
		{"/b.v1.Bx/Anything", true},
		{"/c.v1.C/Get", true},
	} {
		var got bool
		next := func(context.Context, any) (any, error) { return nil, nil }
		probe := func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
			got = true
			return h(ctx, req)
		}
		if _, err := selector.UnaryServerInterceptor(probe, m)(context.Background(), nil, &grpc.UnaryServerInfo{FullMethod: tc.method}, next); err != nil {
			t.Fatal(err)
		}
		if got != tc.match {
			t.Errorf("%s: floodgate runs = %v, want %v", tc.method, got, tc.match)
		}
	}

	none, err := grpcmw.Exempt()
	if err != nil || !none.Match(context.Background(), interceptors.NewServerCallMeta("/a.v1.A/Get", nil, nil)) {
		t.Errorf("Exempt() = %v, %v; want a matcher of every call", none, err)
	}
	for _, bad := range [][]string{{""}, {"a.v1.A/Get"}, {"/a.v1.A"}, {"/a.v1.A/"}, {"//Get"}, {"/a/b/c"}, {"/a/G*"}, {"/*/Get"}} {
		if _, err := grpcmw.Exempt(bad...); err == nil {
			t.Errorf("Exempt(%q) = nil error", bad)
		}
	}
	_, err = grpcmw.Exempt("nope", "/ok/Get", "/x")
	if err == nil || !strings.Contains(err.Error(), `"nope"`) || !strings.Contains(err.Error(), `"/x"`) || strings.Contains(err.Error(), "/ok/Get") {
		t.Errorf("Exempt error %v, want both bad methods named", err)
	}
	defer func() {
		if recover() == nil {
			t.Error("MustExempt(\"bad\") did not panic")
		}
	}()
	grpcmw.MustExempt("bad")
}
