package guard

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/testing/clock"
)

const topPolicy = `
identity:
  user: header:x-user
  api_key: header:x-api-key
concurrency:
  per_key:
    - {name: per-user-in-flight, key: user, cap: 1}
rules:
  - {name: login, match: {method: "POST /login"}, key: [ip, user], rate: 2/1h}
  - {name: per-key, key: [api_key], rate: 3/1h}
  - {name: wide, match: {method: "GET /both"}, key: [ip], rate: [1/1h, 100/24h]}
  - {name: narrow, match: {method: "GET /both"}, key: [user], rate: 1/1h}
`

// topGuard is a guard of topPolicy on a fake clock, and its HTTP
// handler; send sends n requests from ip with the headers hdr and
// returns how many were denied.
func topGuard(t *testing.T) (*Guard, *clock.Fake, func(method, path, ip string, hdr map[string]string, n int) int) {
	t.Helper()
	clk := clock.New(clock.Epoch)
	mux := http.NewServeMux()
	for _, route := range []string{"POST /login", "GET /x", "GET /both"} {
		mux.HandleFunc(route, func(http.ResponseWriter, *http.Request) {})
	}
	g, err := New(context.Background(), WithPolicy([]byte(topPolicy)), WithInProcess(), WithLogger(quiet),
		WithServeMux(mux), withClock(clk))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { g.Close(context.Background()) })
	h := g.HTTP(mux)
	send := func(method, path, ip string, hdr map[string]string, n int) int {
		denied := 0
		for range n {
			req := httptest.NewRequest(method, path, nil)
			req.RemoteAddr = ip + ":4321"
			for k, v := range hdr {
				req.Header.Set(k, v)
			}
			w := httptest.NewRecorder()
			h.ServeHTTP(w, req)
			if w.Code == http.StatusTooManyRequests {
				denied++
			}
		}
		return denied
	}
	return g, clk, send
}

func denials(ds []Denied) string {
	var out []string
	for _, d := range ds {
		out = append(out, fmt.Sprintf("%s %s %d±%d", d.Rule, d.Principal, d.Count, d.Error))
	}
	return strings.Join(out, "\n")
}

// TestTopDenied: every denial of the rate limits is counted by rule and
// principal, exactly, the API key hashed, and forgotten a minute later.
func TestTopDenied(t *testing.T) {
	t.Parallel()
	g, clk, send := topGuard(t)
	if n := send("POST", "/login", "203.0.113.66", map[string]string{"X-User": "admin"}, 10); n != 8 {
		t.Fatalf("admin: %d denied, want 8", n)
	}
	if n := send("POST", "/login", "198.51.100.1", map[string]string{"X-User": "bob"}, 3); n != 1 {
		t.Fatalf("bob: %d denied, want 1", n)
	}
	if n := send("GET", "/x", "198.51.100.2", map[string]string{"X-Api-Key": "sk_secret"}, 5); n != 2 {
		t.Fatalf("api key: %d denied, want 2", n)
	}
	sum := sha256.Sum256([]byte("sk_secret"))
	key := "#" + hex.EncodeToString(sum[:16])
	got, err := g.TopDenied("", 10)
	want := "login ip=203.0.113.66 user=admin 8±0\nlogin ip=198.51.100.1 user=bob 1±0\nper-key api_key=" + key + " 2±0"
	if err != nil || denials(got) != want {
		t.Errorf("TopDenied(\"\", 10) = %v\n%s\nwant\n%s", err, denials(got), want)
	}
	got, err = g.TopDenied("login", 1)
	if err != nil || denials(got) != "login ip=203.0.113.66 user=admin 8±0" {
		t.Errorf("TopDenied(login, 1) = %v\n%s", err, denials(got))
	}
	clk.Advance(time.Minute)
	if got, err := g.TopDenied("", 10); err != nil || len(got) != 0 {
		t.Errorf("a minute later: %v %s, want nothing", err, denials(got))
	}
}

// TestTopDeniedEveryViolatedRule: a denial counts for the binding rule
// and for each other rule it violated (Decision.Quotas), each under its
// window's name.
func TestTopDeniedEveryViolatedRule(t *testing.T) {
	t.Parallel()
	g, _, send := topGuard(t)
	if n := send("GET", "/both", "203.0.113.7", map[string]string{"X-User": "carol"}, 3); n != 2 {
		t.Fatalf("%d denied, want 2", n)
	}
	got, err := g.TopDenied("", 10)
	want := "narrow user=carol 2±0\nwide/1h ip=203.0.113.7 2±0"
	if err != nil || denials(got) != want {
		t.Errorf("TopDenied = %v\n%s\nwant\n%s", err, denials(got), want)
	}
}

func TestTopDeniedBadInput(t *testing.T) {
	t.Parallel()
	g, _, _ := topGuard(t)
	for _, tc := range []struct {
		rule string
		n    int
		want string
	}{
		{"", 0, "guard: TopDenied: n 0 must be in [1, 64]"},
		{"", 65, "n 65 must be in [1, 64]"},
		{"logn", 10, `guard: TopDenied: "logn" is no rule of the policy in force nor a per-key cap (login, narrow, per-key, per-user-in-flight, wide, or deny)`},
	} {
		if _, err := g.TopDenied(tc.rule, tc.n); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("TopDenied(%q, %d) = %v, want %q", tc.rule, tc.n, err, tc.want)
		}
	}
	for _, rule := range []string{"login", "wide/1h", "deny", "per-user-in-flight"} {
		if _, err := g.TopDenied(rule, 1); err != nil {
			t.Errorf("TopDenied(%q) = %v", rule, err)
		}
	}
}

func TestTopDeniedHandler(t *testing.T) {
	t.Parallel()
	g, _, send := topGuard(t)
	send("POST", "/login", "203.0.113.66", map[string]string{"X-User": "admin"}, 5)
	send("POST", "/login", "198.51.100.1", map[string]string{"X-User": "bob"}, 4)
	h := g.TopDeniedHandler()
	get := func(method, query string) *httptest.ResponseRecorder {
		w := httptest.NewRecorder()
		h.ServeHTTP(w, httptest.NewRequest(method, "/debug/floodgate/top"+query, nil))
		return w
	}
	w := get("GET", "?rule=login&n=1")
	var reply topReply
	if err := json.Unmarshal(w.Body.Bytes(), &reply); err != nil || w.Code != 200 || w.Header().Get("Content-Type") != "application/json" {
		t.Fatalf("GET: %d %q %v", w.Code, w.Body, err)
	}
	if reply.IntervalSeconds != 60 || reply.CoveredSeconds != 50 || len(reply.Rules) != 1 || reply.Rules[0] != (topRule{"login", 5}) ||
		denials(reply.Top) != "login ip=203.0.113.66 user=admin 3±0" {
		t.Errorf("reply = %+v", reply)
	}
	for _, tc := range []struct {
		method, query string
		code          int
		want          string
	}{
		{"GET", "?n=x", 400, `guard: top denied: n "x" is not a whole number`},
		{"GET", "?n=100", 400, "guard: top denied: n 100 must be in [1, 64]"},
		{"GET", "?rule=nope", 400, `guard: top denied: "nope" is no rule`},
		{"POST", "", 405, "method POST not allowed"},
	} {
		if w := get(tc.method, tc.query); w.Code != tc.code || !strings.Contains(w.Body.String(), tc.want) {
			t.Errorf("%s %s: %d %q, want %d %q", tc.method, tc.query, w.Code, w.Body, tc.code, tc.want)
		}
	}
}

func TestAppendCapKey(t *testing.T) {
	t.Parallel()
	r := &floodgate.Request{Identity: floodgate.Identity{User: "a b", Tenant: "acme", APIKey: "sk", IP: netip.MustParseAddr("192.0.2.1")}}
	sum := sha256.Sum256([]byte("sk"))
	for _, tc := range []struct {
		key  func(*floodgate.Request) (string, bool)
		want string
		ok   bool
	}{
		{func(r *floodgate.Request) (string, bool) { return r.Identity.User, true }, "user=a%20b", true},
		{func(r *floodgate.Request) (string, bool) { return r.Identity.Tenant, true }, "tenant=acme", true},
		{func(r *floodgate.Request) (string, bool) { return r.Identity.APIKey, true }, "api_key=#" + hex.EncodeToString(sum[:16]), true},
		{func(r *floodgate.Request) (string, bool) { return "other", true }, "", false},
		{func(r *floodgate.Request) (string, bool) { return r.Identity.User, false }, "", false},
	} {
		got, ok := appendCapKey(nil, tc.key, r)
		if string(got) != tc.want || ok != tc.ok {
			t.Errorf("appendCapKey = %q, %v; want %q, %v", got, ok, tc.want, tc.ok)
		}
	}
}

// TestTopDeniedConcurrency: a denial of a per-key in-flight cap counts
// for the cap, keyed on its user.
func TestTopDeniedConcurrency(t *testing.T) {
	t.Parallel()
	g, _, _ := topGuard(t)
	ctx := context.Background()
	r := &floodgate.Request{Method: "GET /x", Identity: floodgate.Identity{User: "dave"}}
	_, done, err := g.Chain().Admit(ctx, r) // holds dave's one slot
	if err != nil {
		t.Fatal(err)
	}
	defer done(floodgate.Result{})
	for range 2 {
		d, _, _ := g.Chain().Admit(ctx, r)
		if d.Allowed || d.Policy != "per-user-in-flight" {
			t.Fatalf("second request: %+v, want denied by per-user-in-flight", d)
		}
		g.top.Observe(ctx, r, d, nil) // what the interceptor's observer does
	}
	if got, err := g.TopDenied("per-user-in-flight", 5); err != nil || denials(got) != "per-user-in-flight user=dave 2±0" {
		t.Errorf("TopDenied = %v %s", err, denials(got))
	}
}

// TestObserveDenialDoesNotAllocate: counting the denial of a principal,
// tracked or not, allocates nothing.
func TestObserveDenialDoesNotAllocate(t *testing.T) {
	if raceEnabled {
		t.Skip("sync.Pool under the race detector")
	}
	g, _, _ := topGuard(t)
	ctx := context.Background()
	r := &floodgate.Request{Method: "POST /login", Identity: floodgate.Identity{User: "admin", IP: netip.MustParseAddr("203.0.113.66")}}
	var d floodgate.Decision
	for d.Allowed || d.Policy == "" {
		d, _, _ = g.limiter.Admit(ctx, r)
	}
	g.top.Observe(ctx, r, d, nil)
	if n := testing.AllocsPerRun(1000, func() { g.top.Observe(ctx, r, d, nil) }); n != 0 {
		t.Errorf("Observe of a denial: %.1f allocations, want 0", n)
	}
	i := 0
	if n := testing.AllocsPerRun(1000, func() {
		i++
		r.Identity.IP = netip.AddrFrom4([4]byte{10, 0, byte(i >> 8), byte(i)})
		g.top.Observe(ctx, r, d, nil)
	}); n != 0 {
		t.Errorf("Observe of a new principal's denial: %.1f allocations, want 0", n)
	}
}

// BenchmarkObserveDenial: what a denial costs the guard's summary: the
// principal written (tiers.Limiter.AppendPrincipal) and counted, for a
// principal already counted and for a new one each time.
func BenchmarkObserveDenial(b *testing.B) {
	g, err := New(context.Background(), WithPolicy([]byte(topPolicy)), WithInProcess(), WithLogger(quiet))
	if err != nil {
		b.Fatal(err)
	}
	defer g.Close(context.Background())
	ctx := context.Background()
	r := &floodgate.Request{Method: "POST /login", Identity: floodgate.Identity{User: "admin", IP: netip.MustParseAddr("203.0.113.66")}}
	var d floodgate.Decision
	for d.Allowed || d.Policy == "" {
		d, _, _ = g.limiter.Admit(ctx, r)
	}
	b.Run("tracked", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			g.top.Observe(ctx, r, d, nil)
		}
	})
	b.Run("new", func(b *testing.B) {
		b.ReportAllocs()
		for i := 0; b.Loop(); i++ {
			r.Identity.IP = netip.AddrFrom4([4]byte{10, byte(i >> 16), byte(i >> 8), byte(i)})
			g.top.Observe(ctx, r, d, nil)
		}
	})
}
