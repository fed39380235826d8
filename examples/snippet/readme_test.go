package main

import (
	"context"
	"net"
	"net/netip"
	"os"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors/logging"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/emptypb"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/internal/shoppb"
	fgotel "github.com/floodgate-go/floodgate/otel"
	"github.com/floodgate-go/floodgate/testing/redistest"
	"github.com/floodgate-go/floodgate/tiers"
	"github.com/floodgate-go/floodgate/tiers/memstore"
)

// TestReadmeHasSections keeps the code the top README and the docs/ pages
// show in step with the files that compile it: each page holds the text
// between its file's markers verbatim, in a go block. The README's first
// screen is whole programs (examples/quickstart) with their policy.yaml.
func TestReadmeHasSections(t *testing.T) {
	top, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	policy, err := os.ReadFile("../quickstart/policy.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(top), "```yaml\n"+string(policy)+"```") {
		t.Errorf("the top README.md does not contain examples/quickstart/policy.yaml verbatim, in a yaml block")
	}
	for _, tc := range []struct {
		file, marker, page string
		lines              int
	}{
		{"../quickstart/http/main.go", "quickstart-http", "README.md", 60},
		{"../quickstart/grpc/main.go", "quickstart-grpc", "README.md", 60},
		{"middleware.go", "snippet-grpcmw", "docs/integrations.md", 35},
		{"redis.go", "snippet-redis", "docs/redis.md", 35},
		{"localfirst.go", "snippet-localfirst", "docs/consistency.md", 35},
		{"overload.go", "snippet-overload", "docs/overload.md", 35},
	} {
		page, err := os.ReadFile("../../" + tc.page)
		if err != nil {
			t.Fatal(err)
		}
		src, err := os.ReadFile(tc.file)
		if err != nil {
			t.Fatal(err)
		}
		s := string(src)
		begin, end := "// "+tc.marker+":start\n", "// "+tc.marker+":end"
		i, j := strings.Index(s, begin), strings.Index(s, end)
		if i < 0 || j < i {
			t.Fatalf("%s lacks the %s markers", tc.file, tc.marker)
		}
		snippet := strings.TrimSpace(s[i+len(begin) : j])
		if n := strings.Count(snippet, "\n") + 1; n > tc.lines {
			t.Errorf("%s: snippet is %d lines; keep it short", tc.file, n)
		}
		if !strings.Contains(string(page), "```go\n"+snippet+"\n```") {
			t.Errorf("%s does not contain the snippet of %s verbatim, in a go block:\n%s", tc.page, tc.file, snippet)
		}
	}
}

func perIPLimiter(t *testing.T, rate string) *tiers.Limiter {
	t.Helper()
	policy, err := tiers.Load([]byte("rules:\n  - {name: per-ip, key: [ip], rate: " + rate + "}\n"))
	if err != nil {
		t.Fatal(err)
	}
	store, err := memstore.New()
	if err != nil {
		t.Fatal(err)
	}
	limits, err := tiers.NewLimiter(store, policy)
	if err != nil {
		t.Fatal(err)
	}
	return limits
}

// adminDesc is a hand-written admin.v1.Admin service with one method,
// Flush(Empty) Empty, for the snippet's exempt service.
var adminDesc = grpc.ServiceDesc{
	ServiceName: "admin.v1.Admin",
	HandlerType: (*any)(nil),
	Methods: []grpc.MethodDesc{{
		MethodName: "Flush",
		Handler: func(_ any, ctx context.Context, dec func(any) error, in grpc.UnaryServerInterceptor) (any, error) {
			req := new(emptypb.Empty)
			if err := dec(req); err != nil {
				return nil, err
			}
			h := func(context.Context, any) (any, error) { return new(emptypb.Empty), nil }
			if in == nil {
				return h(ctx, req)
			}
			return in(ctx, req, &grpc.UnaryServerInfo{FullMethod: "/admin.v1.Admin/Flush"}, h)
		},
	}},
}

// serveLoopback serves srv (the shop and the admin service) on 127.0.0.1.
func serveLoopback(t *testing.T, srv *grpc.Server) *grpc.ClientConn {
	t.Helper()
	shoppb.RegisterShopServer(srv, shop{})
	srv.RegisterService(&adminDesc, struct{}{})
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
	return conn
}

// TestMiddlewareSnippet runs docs/integrations.md's go-grpc-middleware
// server over loopback behind a trusted proxy (127.0.0.1 forwarding
// X-Forwarded-For).
func TestMiddlewareSnippet(t *testing.T) {
	var (
		mu    sync.Mutex
		lines []string
	)
	logger := logging.LoggerFunc(func(_ context.Context, _ logging.Level, msg string, fields ...any) {
		var b strings.Builder
		b.WriteString(msg)
		for i := 0; i+1 < len(fields); i += 2 {
			b.WriteString(" " + fields[i].(string) + "=")
			if s, ok := fields[i+1].(string); ok {
				b.WriteString(s)
			}
		}
		mu.Lock()
		lines = append(lines, b.String())
		mu.Unlock()
	})
	srv, err := newMiddlewareServer(perIPLimiter(t, "2/1m"), []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")}, logger)
	if err != nil {
		t.Fatal(err)
	}
	conn := serveLoopback(t, srv)
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	from := func(ip string) context.Context { return metadata.AppendToOutgoingContext(ctx, "x-forwarded-for", ip) }
	client := shoppb.NewShopClient(conn)
	var codesSeen []codes.Code
	for range 3 {
		_, err := client.Search(from("203.0.113.7"), &shoppb.SearchRequest{})
		codesSeen = append(codesSeen, status.Code(err))
	}
	if codesSeen[0] != codes.OK || codesSeen[1] != codes.OK || codesSeen[2] != codes.ResourceExhausted {
		t.Errorf("3 searches from 203.0.113.7: %v, want OK OK ResourceExhausted", codesSeen)
	}
	if _, err := client.Search(from("198.51.100.9"), &shoppb.SearchRequest{}); err != nil {
		t.Errorf("search from 198.51.100.9: %v, want ok (realip's address, its own bucket)", err)
	}
	for i := range 5 {
		if err := conn.Invoke(from("203.0.113.7"), "/admin.v1.Admin/Flush", new(emptypb.Empty), new(emptypb.Empty)); err != nil {
			t.Fatalf("exempt admin call %d: %v", i+1, err)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	var limited bool
	for _, l := range lines {
		limited = limited || strings.HasPrefix(l, "finished call") && strings.Contains(l, "grpc.method=Search") &&
			strings.Contains(l, "floodgate.decision=limited") && strings.Contains(l, "floodgate.policy=per-ip")
	}
	if !limited {
		t.Errorf("no finished-call line with the denial's floodgate fields in:\n%s", strings.Join(lines, "\n"))
	}
}

func TestRatelimitSnippet(t *testing.T) {
	srv, err := newRatelimitServer(perIPLimiter(t, "2/1m"))
	if err != nil {
		t.Fatal(err)
	}
	client := shoppb.NewShopClient(serveLoopback(t, srv))
	var last error
	for range 3 {
		_, last = client.Search(t.Context(), &shoppb.SearchRequest{})
	}
	if st := status.Convert(last); st.Code() != codes.ResourceExhausted || !strings.Contains(st.Message(), "grpc_ratelimit") || len(st.Details()) != 0 {
		t.Errorf("third search: %v (details %v), want the ratelimit interceptor's RESOURCE_EXHAUSTED without details", last, st.Details())
	}
}

// TestRedisSnippet runs docs/redis.md's Redis setup against a real
// redis-server, then kills it: the fallback decides locally.
func TestRedisSnippet(t *testing.T) {
	if _, _, err := newRedisLimiter("localhost:6379", nil, one); err == nil || !strings.Contains(err.Error(), "redisstore: NewClient") {
		t.Errorf("a URL without scheme: err = %v", err)
	}
	redis := redistest.Start(t)
	policy, err := tiers.Load([]byte("rules:\n  - {name: per-user, key: [user], rate: 2/1m}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := newRedisLimiter("redis://"+redis.Addr(), nil, one); err == nil {
		t.Error("nil policy: no error")
	}
	limits, closeAll, err := newRedisLimiter("redis://"+redis.Addr(), policy, one)
	if err != nil {
		t.Fatal(err)
	}
	defer closeAll()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	admit := func() floodgate.Decision {
		t.Helper()
		d, done, _ := limits.Admit(ctx, &floodgate.Request{Method: "/x/Y", Identity: floodgate.Identity{User: "u1"}})
		if done != nil {
			done(floodgate.Result{})
		}
		return d
	}
	for i, want := range []bool{true, true, false} {
		if d := admit(); d.Allowed != want || d.Source != floodgate.SourceStore {
			t.Errorf("take %d: allowed %v source %s, want %v from the store", i+1, d.Allowed, d.Source, want)
		}
	}
	redis.Kill()
	if d := admit(); !d.Source.Degraded() {
		t.Errorf("with Redis killed: source %s, want a fallback decision", d.Source)
	}
}

// TestLocalFirstSnippet runs docs/consistency.md's local-first wiring
// against a real redis-server with a policy of every kind of rule: it
// loads, the async rule is decided by async and the leased one from a
// lease, the settle rule settles and the max_wait rule waits.
func TestLocalFirstSnippet(t *testing.T) {
	redis := redistest.Start(t)
	obs, err := fgotel.New()
	if err != nil {
		t.Fatal(err)
	}
	policy, err := tiers.Load([]byte(`
rules:
  - {name: tenants, match: {method: /async}, key: [tenant], rate: 1000/1s, consistency: async}
  - {name: users, match: {method: /leased}, key: [user], rate: 1000/1s, consistency: leased}
  - {name: tokens, match: {method: /settle}, key: [user], rate: 1000/1h, cost: 100, settle: true}
  - {name: shaped, match: {method: /wait}, key: [user], rate: 4/1s, burst: 1, max_wait: 1s}
`))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	limits, closeLF, err := newLocalFirstLimiter(ctx, redis.Client(), obs, policy)
	if err != nil {
		t.Fatal(err)
	}
	defer closeLF(context.Background())
	admit := func(method string) (floodgate.Decision, floodgate.Done) {
		t.Helper()
		d, done, err := limits.Admit(ctx, &floodgate.Request{Method: method, Identity: floodgate.Identity{User: "u", Tenant: "acme"}})
		if err != nil || !d.Allowed {
			t.Fatalf("%s: %+v, %v; want allowed", method, d, err)
		}
		return d, done
	}
	if d, _ := admit("/async"); d.Source != floodgate.SourceAsync {
		t.Errorf("async rule: source %s, want async", d.Source)
	}
	var sources []floodgate.Source
	for i := 0; i < 50 && (len(sources) == 0 || sources[len(sources)-1] != floodgate.SourceLease); i++ {
		d, _ := admit("/leased")
		sources = append(sources, d.Source)
	}
	if sources[len(sources)-1] != floodgate.SourceLease {
		t.Errorf("leased rule: sources %v, never lease", sources)
	}
	d1, done := admit("/settle")
	done(floodgate.Result{Cost: 10, HasCost: true})
	// Settled to 10, the estimate's 100 less 90: a second request of 100
	// leaves 10 fewer units than the first did.
	if d2, _ := admit("/settle"); !d2.Allowed || d2.Remaining != d1.Remaining-10 {
		t.Errorf("settle rule: second request allowed %v with %d remaining, want %d (the 90 given back)", d2.Allowed, d2.Remaining, d1.Remaining-10)
	}
	admit("/wait")
	if d, _ := admit("/wait"); d.Waited <= 0 {
		t.Errorf("max_wait rule: the second request did not wait: %+v", d)
	}
}

// one is a fleet of one instance, for newRedisLimiter.
func one() int { return 1 }

// usesGuard matches a line that calls a method of the Guard g.
var usesGuard = regexp.MustCompile(`\bg\.[A-Z]`)

// TestQuickstartLines counts the lines of Go the README's first-screen
// services spend on floodgate: from guard.New to the deferred Close
// (the options, the error check, the shutdown), and every other line
// that uses the Guard. The issue that made package guard asked for at
// most 10 per service.
func TestQuickstartLines(t *testing.T) {
	for _, file := range []string{"../quickstart/http/main.go", "../quickstart/grpc/main.go"} {
		src, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		n, in := 0, false
		for line := range strings.Lines(string(src)) {
			switch {
			case strings.Contains(line, "g, err := guard.New("):
				in = true
				n++
			case in:
				n++
				in = !strings.Contains(line, "defer g.Close(")
			case usesGuard.MatchString(line):
				n++
			}
		}
		if n == 0 || n > 10 {
			t.Errorf("%s: %d lines of floodgate, want 1 to 10", file, n)
		}
		t.Logf("%s: %d lines of floodgate", file, n)
	}
}

// TestOverloadSnippet builds docs/overload.md's adaptive chain and admits
// a request through it. Where the cgroup cannot be read (not Linux, no
// /sys/fs/cgroup) cpu.New refuses, naming the file, and the chain is not
// built: the snippet then only compiled.
func TestOverloadSnippet(t *testing.T) {
	chain, err := newAdaptiveChain(perIPLimiter(t, "2/1m"))
	if err != nil {
		if strings.HasPrefix(err.Error(), "cpu:") {
			t.Skipf("no cgroup to read here: %v", err)
		}
		t.Fatal(err)
	}
	if len(chain) != 3 {
		t.Fatalf("chain of %d stages, want shedder, adaptive limit, rate limits", len(chain))
	}
	d, done, err := chain.Admit(t.Context(), &floodgate.Request{Method: "/x/Y"})
	if err != nil || !d.Allowed {
		t.Fatalf("first request: %+v, %v; want allowed", d, err)
	}
	if done != nil {
		done(floodgate.Result{})
	}
}
