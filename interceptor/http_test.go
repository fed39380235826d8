package interceptor

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/testing/clock"
)

type httpResult struct {
	status int
	header http.Header
	body   string
}

func get(t *testing.T, srv *httptest.Server, method, path string, hdr ...string) httpResult {
	t.Helper()
	req, err := http.NewRequestWithContext(testCtx(t), method, srv.URL+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Add(hdr[i], hdr[i+1])
	}
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	resp.Header.Del("Date")
	return httpResult{resp.StatusCode, resp.Header, string(b)}
}

// checkHeader asserts the exact values of each named field; a nil want
// means the field must be absent.
func checkHeader(t *testing.T, h http.Header, want map[string][]string) {
	t.Helper()
	for k, w := range want {
		got := h.Values(k)
		if strings.Join(got, "\x00") != strings.Join(w, "\x00") || len(got) != len(w) {
			t.Errorf("%s = %q, want %q", k, got, w)
		}
	}
}

func okHandler(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok") }

func muxServer(t *testing.T, mw func(http.Handler) http.Handler) *httptest.Server {
	mux := http.NewServeMux()
	mux.Handle("GET /v1/items/{id}", mw(http.HandlerFunc(okHandler)))
	mux.Handle("POST /v1/items", mw(http.HandlerFunc(okHandler)))
	mux.Handle("GET /healthz", mw(http.HandlerFunc(okHandler)))
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return srv
}

func TestHTTPAllowHeaders(t *testing.T) {
	t.Parallel()
	s := &stage{decide: func(*floodgate.Request) (floodgate.Decision, error) {
		return floodgate.Decision{Allowed: true, Stage: floodgate.StageTiers, Policy: "tenant-plan",
			Limit: 5000, Window: time.Hour, Remaining: 4123, Reset: 11500 * time.Millisecond}, nil
	}}
	clk := clock.New(time.Time{})
	srv := muxServer(t, mustHTTP(s, WithLegacyHeaders(), WithClock(clk)))
	res := get(t, srv, "GET", "/v1/items/42")
	if res.status != 200 || res.body != "ok" {
		t.Fatalf("got %d %q", res.status, res.body)
	}
	checkHeader(t, res.header, map[string][]string{
		"RateLimit-Policy":      {`"tenant-plan";q=5000;w=3600`},
		"RateLimit":             {`"tenant-plan";r=4123;t=12`},
		"X-RateLimit-Limit":     {"5000"},
		"X-RateLimit-Remaining": {"4123"},
		"X-RateLimit-Reset":     {"1767225612"}, // 2026-01-01T00:00:00Z + 12 s
		"Retry-After":           nil,
		"Cache-Control":         nil,
	})
	rs := s.requests()
	if rs[0].Method != "GET /v1/items/{id}" || rs[0].Priority != floodgate.PriorityRead || rs[0].Identity.IP != netip.MustParseAddr("127.0.0.1") {
		t.Errorf("request = %+v", rs[0])
	}
	if s.dones.Load() != 1 || s.held.Load() != 0 {
		t.Errorf("dones %d held %d", s.dones.Load(), s.held.Load())
	}
	if res := get(t, srv, "POST", "/v1/items"); res.status != 200 {
		t.Fatal(res.status)
	}
	if rs := s.requests(); rs[1].Method != "POST /v1/items" || rs[1].Priority != floodgate.PriorityWrite {
		t.Errorf("POST request = %+v", rs[1])
	}
}

func TestHTTPDeny429(t *testing.T) {
	t.Parallel()
	s := &stage{decide: deny(floodgate.Decision{Stage: floodgate.StageTiers, Policy: "search",
		Limit: 10, Window: time.Second, Remaining: 0, Reset: 2 * time.Second, RetryAfter: 1100 * time.Millisecond})}
	srv := muxServer(t, mustHTTP(s, WithLegacyHeaders(), WithClock(clock.New(time.Time{}))))
	res := get(t, srv, "GET", "/v1/items/1")
	if res.status != http.StatusTooManyRequests {
		t.Fatalf("status = %d", res.status)
	}
	wantBody := `{"type":"https://iana.org/assignments/http-problem-types#quota-exceeded",` +
		`"title":"Request cannot be satisfied as assigned quota has been exceeded","status":429,` +
		`"detail":"rate limit exceeded; retry after 2 seconds","violated-policies":["search"]}` + "\n"
	if res.body != wantBody {
		t.Errorf("body =\n%s\nwant\n%s", res.body, wantBody)
	}
	checkHeader(t, res.header, map[string][]string{
		"Content-Type":          {"application/problem+json"},
		"Cache-Control":         {"no-store"},
		"Retry-After":           {"2"},
		"Content-Length":        {strconv.Itoa(len(wantBody))},
		"RateLimit-Policy":      {`"search";q=10;w=1`},
		"RateLimit":             {`"search";r=0;t=2`},
		"X-RateLimit-Limit":     {"10"},
		"X-RateLimit-Remaining": {"0"},
		"X-RateLimit-Reset":     {"1767225602"},
	})
	if s.held.Load() != 0 || s.dones.Load() != 0 {
		t.Error("deny held a slot")
	}
}

func TestHTTPDenyShedHiddenConcurrency(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		d      floodgate.Decision
		status int
		body   string
		header map[string][]string
	}{
		{
			name:   "shed",
			d:      floodgate.Decision{Stage: floodgate.StageShedder, Policy: "shedder", Limit: 64, RetryAfter: 300 * time.Millisecond},
			status: 503,
			body: `{"type":"https://iana.org/assignments/http-problem-types#temporary-reduced-capacity",` +
				`"title":"Service temporarily has reduced capacity","status":503,` +
				`"detail":"server overloaded: request shed; retry after 1 second","violated-policies":["shedder"]}` + "\n",
			header: map[string][]string{"Retry-After": {"1"}, "Cache-Control": {"no-store"}, "RateLimit": nil, "RateLimit-Policy": nil},
		},
		{
			name:   "hidden quota",
			d:      floodgate.Decision{Stage: floodgate.StageTiers, Policy: "login", Limit: 5, Window: time.Minute, RetryAfter: 40 * time.Second, HideQuota: true},
			status: 429,
			body: `{"type":"https://iana.org/assignments/http-problem-types#quota-exceeded",` +
				`"title":"Request cannot be satisfied as assigned quota has been exceeded","status":429,` +
				`"detail":"rate limit exceeded; retry after 40 seconds"}` + "\n",
			header: map[string][]string{"Retry-After": {"40"}, "RateLimit": nil, "RateLimit-Policy": nil, "X-RateLimit-Limit": nil},
		},
		{
			name:   "concurrency, no wait can cure",
			d:      floodgate.Decision{Stage: floodgate.StageConcurrency, Policy: "in-flight", Limit: 20},
			status: 429,
			body: `{"type":"https://iana.org/assignments/http-problem-types#quota-exceeded",` +
				`"title":"Request cannot be satisfied as assigned quota has been exceeded","status":429,` +
				`"detail":"concurrency limit exceeded","violated-policies":["in-flight"]}` + "\n",
			header: map[string][]string{"Retry-After": nil, "Cache-Control": {"no-store"}, "RateLimit": nil},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := muxServer(t, mustHTTP(&stage{decide: deny(tc.d)}, WithLegacyHeaders()))
			res := get(t, srv, "GET", "/v1/items/1")
			if res.status != tc.status || res.body != tc.body {
				t.Errorf("got %d %s\nwant %d %s", res.status, res.body, tc.status, tc.body)
			}
			checkHeader(t, res.header, tc.header)
		})
	}
}

func TestHTTPHiddenQuotaOnAllow(t *testing.T) {
	t.Parallel()
	s := &stage{decide: func(*floodgate.Request) (floodgate.Decision, error) {
		return floodgate.Decision{Allowed: true, Stage: floodgate.StageTiers, Policy: "login", Limit: 5, Window: time.Minute, Remaining: 4, HideQuota: true}, nil
	}}
	res := get(t, muxServer(t, mustHTTP(s, WithLegacyHeaders())), "GET", "/v1/items/1")
	checkHeader(t, res.header, map[string][]string{"RateLimit": nil, "RateLimit-Policy": nil, "X-RateLimit-Remaining": nil})
}

func TestSFString(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"plain":    `"plain"`,
		`a"b\c`:    `"a\"b\\c"`,
		"sp ace~!": `"sp ace~!"`,
		"":         `""`,
	} {
		if got, ok := sfString(in); !ok || got != want {
			t.Errorf("sfString(%q) = %q, %v; want %q", in, got, ok, want)
		}
	}
	for _, bad := range []string{"tab\t", "new\nline", "é", "\x7f"} {
		if _, ok := sfString(bad); ok {
			t.Errorf("sfString(%q) accepted", bad)
		}
	}
	// Through the middleware: escaped name; un-encodable name omits the fields.
	for name, want := range map[string][]string{`q"uote`: {`"q\"uote";q=1;w=1`}, "caf\u00e9": nil} {
		s := &stage{decide: func(*floodgate.Request) (floodgate.Decision, error) {
			return floodgate.Decision{Allowed: true, Stage: floodgate.StageTiers, Policy: name, Limit: 1, Window: time.Second, Remaining: 1}, nil
		}}
		res := get(t, muxServer(t, mustHTTP(s)), "GET", "/v1/items/1")
		checkHeader(t, res.header, map[string][]string{"RateLimit-Policy": want})
	}
}

func TestHTTPHealthRouteAndFallback(t *testing.T) {
	t.Parallel()
	s := &stage{decide: deny(floodgate.Decision{Stage: floodgate.StageShedder, RetryAfter: time.Second})}
	srv := muxServer(t, mustHTTP(s, WithHealthPaths("/healthz")))
	if res := get(t, srv, "GET", "/healthz"); res.status != 200 {
		t.Errorf("health = %d", res.status)
	}
	if s.admits.Load() != 0 {
		t.Errorf("health path admitted")
	}

	// Middleware around the whole mux: r.Pattern is empty there.
	for _, tc := range []struct {
		name string
		opts []Option
		want string
	}{
		{"no route source", nil, ""},
		{"WithServeMux", nil, "GET /v1/items/{id}"},
		{"WithRoute", []Option{WithRoute(func(*http.Request) string { return "items" })}, "items"},
		{"WithRoute by path", []Option{WithRoute(func(r *http.Request) string { return r.Method + " " + r.URL.Path })}, "GET /v1/items/7"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			mux := http.NewServeMux()
			mux.HandleFunc("GET /v1/items/{id}", okHandler)
			opts := tc.opts
			if tc.name == "WithServeMux" {
				opts = append(opts, WithServeMux(mux))
			}
			st := &stage{}
			srv := httptest.NewServer(mustHTTP(st, opts...)(mux))
			defer srv.Close()
			if res := get(t, srv, "GET", "/v1/items/7"); res.status != 200 {
				t.Fatal(res.status)
			}
			if got := st.requests()[0].Method; got != tc.want {
				t.Errorf("Method = %q, want %q", got, tc.want)
			}
		})
	}
}

// perIPLimiter allows one request per client address: it stands in for a
// rule keyed on ip, to show which address a request is charged to.
type perIPLimiter struct {
	mu   sync.Mutex
	seen map[netip.Addr]bool
}

func (l *perIPLimiter) Admit(_ context.Context, r *floodgate.Request) (floodgate.Decision, floodgate.Done, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.seen == nil {
		l.seen = map[netip.Addr]bool{}
	}
	if l.seen[r.Identity.IP] {
		return floodgate.Decision{Stage: floodgate.StageTiers, Policy: "ip", Limit: 1, Window: time.Minute, RetryAfter: time.Minute}, nil, nil
	}
	l.seen[r.Identity.IP] = true
	return floodgate.Decision{Allowed: true, Stage: floodgate.StageTiers, Policy: "ip", Limit: 1, Window: time.Minute}, nil, nil
}

func TestHTTPSpoofing(t *testing.T) {
	t.Parallel()
	// Untrusted peer (127.0.0.1 is not a listed proxy): rotating
	// X-Forwarded-For values does not escape the per-IP limit.
	l := &perIPLimiter{}
	srv := muxServer(t, mustHTTP(l, WithTrustedProxies("10.0.0.0/8")))
	if res := get(t, srv, "GET", "/v1/items/1", "X-Forwarded-For", "1.2.3.4"); res.status != 200 {
		t.Fatalf("first = %d", res.status)
	}
	if res := get(t, srv, "GET", "/v1/items/1", "X-Forwarded-For", "5.6.7.8"); res.status != 429 {
		t.Fatalf("spoofed second = %d, want 429 (limited by the real address)", res.status)
	}
	if !l.seen[netip.MustParseAddr("127.0.0.1")] || l.seen[netip.MustParseAddr("1.2.3.4")] {
		t.Errorf("charged addresses %v", l.seen)
	}

	// Trusted chain: peer 127.0.0.1 and 10/8 are proxies; the client is the
	// rightmost untrusted hop, whatever the client prepended.
	for _, tc := range []struct {
		name   string
		opts   []Option
		header []string
		want   string
	}{
		{"xff", nil, []string{"X-Forwarded-For", "6.6.6.6, 1.2.3.4, 10.0.0.9"}, "1.2.3.4"},
		{"xff several lines", nil, []string{"X-Forwarded-For", "6.6.6.6", "X-Forwarded-For", "1.2.3.4, 10.0.0.9"}, "1.2.3.4"},
		{"xff all trusted", nil, []string{"X-Forwarded-For", "10.0.0.1, 10.0.0.9"}, "10.0.0.1"},
		{"xff garbage stops at last vouched hop", nil, []string{"X-Forwarded-For", "1.2.3.4, garbage, 10.0.0.9"}, "10.0.0.9"},
		{"forwarded", []Option{WithClientIPHeader(Forwarded)},
			[]string{"Forwarded", `for=6.6.6.6, for="[2001:db8::1]:4711";proto=https, for=10.0.0.9`}, "2001:db8::1"},
		{"forwarded ignores xff", []Option{WithClientIPHeader(Forwarded)},
			[]string{"X-Forwarded-For", "9.9.9.9", "Forwarded", "for=1.2.3.4"}, "1.2.3.4"},
		{"x-real-ip", []Option{WithClientIPHeader(XRealIP)}, []string{"X-Real-IP", "1.2.3.4", "X-Forwarded-For", "9.9.9.9"}, "1.2.3.4"},
		{"no header", nil, nil, "127.0.0.1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st := &stage{}
			srv := muxServer(t, mustHTTP(st, append([]Option{WithTrustedProxies("127.0.0.1", "10.0.0.0/8")}, tc.opts...)...))
			if res := get(t, srv, "GET", "/v1/items/1", tc.header...); res.status != 200 {
				t.Fatal(res.status)
			}
			if got := st.requests()[0].Identity.IP; got != netip.MustParseAddr(tc.want) {
				t.Errorf("IP = %v, want %s", got, tc.want)
			}
		})
	}
}

func TestHTTPReusesRequestAndInvalidOptions(t *testing.T) {
	t.Parallel()
	a, b := &stage{}, &stage{}
	mw1, mw2 := mustHTTP(a, WithUser(FromHeader("X-User"))), mustHTTP(b)
	mux := http.NewServeMux()
	mux.Handle("GET /x", mw1(mw2(http.HandlerFunc(okHandler))))
	srv := httptest.NewServer(mux)
	defer srv.Close()
	if res := get(t, srv, "GET", "/x", "X-User", "u"); res.status != 200 {
		t.Fatal(res.status)
	}
	if a.requests()[0] != b.requests()[0] || b.requests()[0].Identity.User != "u" {
		t.Error("second middleware built its own Request")
	}
	if _, err := New(WithHealthPaths("healthz")); err == nil || !strings.Contains(err.Error(), `"healthz" does not start with /`) {
		t.Errorf("New(WithHealthPaths(\"healthz\")) = %v", err)
	}
}

func TestHTTPDoneOnPanicAndOnce(t *testing.T) {
	t.Parallel()
	s := &stage{}
	h := mustHTTP(s)(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { panic("boom") }))
	func() {
		defer func() {
			if recover() == nil {
				t.Error("panic swallowed")
			}
		}()
		req := httptest.NewRequest("GET", "/x", nil)
		req.Pattern = "GET /x"
		h.ServeHTTP(httptest.NewRecorder(), req)
	}()
	if s.dones.Load() != 1 || s.held.Load() != 0 {
		t.Errorf("dones %d held %d, want 1 0", s.dones.Load(), s.held.Load())
	}
	// A RemoteAddr that is not an address yields no IP, not a guess.
	req := httptest.NewRequest("GET", "/x", nil)
	req.RemoteAddr = "pipe"
	mustHTTP(s)(http.HandlerFunc(okHandler)).ServeHTTP(httptest.NewRecorder(), req)
	if ip := s.requests()[1].Identity.IP; ip.IsValid() {
		t.Errorf("IP = %v from RemoteAddr %q", ip, req.RemoteAddr)
	}
}

func TestHTTPSkipPriorityAndMethods(t *testing.T) {
	t.Parallel()
	s := &stage{}
	srv := muxServer(t, mustHTTP(s,
		WithSkip(func(m string) bool { return m == "POST /v1/items" }),
		WithPriorityHeader("X-Priority"),
		WithMethods(map[string]floodgate.MethodOptions{"GET /v1/items/{id}": {Cost: 4}}),
	))
	if res := get(t, srv, "POST", "/v1/items"); res.status != 200 {
		t.Fatal(res.status)
	}
	if s.admits.Load() != 0 {
		t.Fatal("skipped route was admitted")
	}
	if res := get(t, srv, "GET", "/v1/items/1", "X-Priority", "critical"); res.status != 200 {
		t.Fatal(res.status)
	}
	if res := get(t, srv, "GET", "/v1/items/1"); res.status != 200 {
		t.Fatal(res.status)
	}
	rs := s.requests()
	if rs[0].Priority != floodgate.PriorityCritical || rs[0].Cost != 4 {
		t.Errorf("with header: %+v", rs[0])
	}
	if rs[1].Priority != floodgate.PriorityRead || rs[1].Cost != 4 {
		t.Errorf("without header: %+v", rs[1])
	}
}

// TestHTTPUnderOuterRouter mounts the middleware under an outer router,
// the usual way to keep /healthz outside it: the outer mux sets
// r.Pattern to "/", and a rule written for the inner routes must still
// see the inner pattern, named by WithServeMux's mux. Without the mux
// the request is named by the outer route, so this fails if r.Pattern
// wins over WithServeMux.
func TestHTTPUnderOuterRouter(t *testing.T) {
	t.Parallel()
	inner := http.NewServeMux()
	inner.HandleFunc("GET /v1/items/{id}", okHandler)
	inner.HandleFunc("POST /v1/orders", okHandler)
	for _, tc := range []struct {
		name string
		opts []Option
		want []string
	}{
		{"WithServeMux", []Option{WithServeMux(inner)}, []string{"GET /v1/items/{id}", "POST /v1/orders"}},
		{"without", nil, []string{"/", "/"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			st := &stage{}
			top := http.NewServeMux()
			top.HandleFunc("GET /healthz", okHandler)
			top.Handle("/", mustHTTP(st, tc.opts...)(inner))
			srv := httptest.NewServer(top)
			defer srv.Close()
			for _, req := range [][2]string{{"GET", "/v1/items/7"}, {"POST", "/v1/orders"}, {"GET", "/healthz"}} {
				if res := get(t, srv, req[0], req[1]); res.status != 200 {
					t.Fatalf("%s %s: %d", req[0], req[1], res.status)
				}
			}
			reqs := st.requests()
			if len(reqs) != len(tc.want) {
				t.Fatalf("%d requests reached the stage, want %d (/healthz stays outside)", len(reqs), len(tc.want))
			}
			for i, r := range reqs {
				if r.Method != tc.want[i] {
					t.Errorf("request %d named %q, want %q", i, r.Method, tc.want[i])
				}
			}
		})
	}
}
