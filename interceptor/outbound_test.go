package interceptor

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/internal/cooldown"
	"github.com/floodgate-go/floodgate/internal/testpb"
	"github.com/floodgate-go/floodgate/testing/clock"
	"github.com/floodgate-go/floodgate/tiers"
	"github.com/floodgate-go/floodgate/tiers/memstore"
)

// outboundLimiter is a limiter over an in-process store on clk, of the
// outbound rules in yaml.
func outboundLimiter(t *testing.T, clk floodgate.Clock, yaml string) *tiers.Limiter {
	t.Helper()
	p, err := tiers.Load([]byte(yaml))
	if err != nil {
		t.Fatal(err)
	}
	st, err := memstore.New(memstore.WithClock(clk))
	if err != nil {
		t.Fatal(err)
	}
	lim, err := tiers.NewLimiter(st, p, tiers.WithClock(clk))
	if err != nil {
		t.Fatal(err)
	}
	return lim
}

// vendor is a loopback HTTP server that counts the requests it received
// and answers each with answer.
func vendor(t *testing.T, answer func(w http.ResponseWriter, n int64)) (*httptest.Server, *atomic.Int64) {
	var n atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		answer(w, n.Add(1))
	}))
	t.Cleanup(srv.Close)
	return srv, &n
}

func outGet(t *testing.T, c *http.Client, u string) (int, error) {
	t.Helper()
	resp, err := c.Get(u)
	if err != nil {
		return 0, err
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close()
	return resp.StatusCode, nil
}

type closeBody struct {
	io.Reader
	closed atomic.Bool
}

func (b *closeBody) Close() error { b.closed.Store(true); return nil }

// The RoundTripper charges every request to the outbound rule matching
// "/HOST/PATH"; a refused one is not sent, its body is closed, and its
// error says RESOURCE_EXHAUSTED with the rule's RetryInfo through the
// http.Client's *url.Error.
func TestRoundTripperLimits(t *testing.T) {
	t.Parallel()
	clk := clock.New(clock.Epoch)
	lim := outboundLimiter(t, clk, `
rules:
  - name: vendor
    match: {method: "/*/v1/*"}
    rate: 2/1s
`)
	srv, hits := vendor(t, func(w http.ResponseWriter, _ int64) {})
	ic, err := New(WithClock(clk))
	if err != nil {
		t.Fatal(err)
	}
	c := &http.Client{Transport: ic.RoundTripper(lim, nil)}
	for range 2 {
		if code, err := outGet(t, c, srv.URL+"/v1/chat"); err != nil || code != 200 {
			t.Fatalf("admitted call: %d, %v", code, err)
		}
	}
	if code, err := outGet(t, c, srv.URL+"/other"); err != nil || code != 200 {
		t.Fatalf("a path no rule matches: %d, %v", code, err)
	}
	body := &closeBody{Reader: strings.NewReader("x")}
	req, _ := http.NewRequest(http.MethodPost, srv.URL+"/v1/chat", body)
	_, err = c.Do(req)
	var ue *url.Error
	if !errors.As(err, &ue) || !IsClientThrottled(err) {
		t.Fatalf("refused call: %v, want a *url.Error that IsClientThrottled", err)
	}
	if st, _ := status.FromError(err); st.Code() != codes.ResourceExhausted {
		t.Fatalf("refused call's status %v, want RESOURCE_EXHAUSTED", st)
	}
	if d, ok := RetryDelay(err, nil); !ok || d != 500*time.Millisecond {
		t.Fatalf("RetryDelay %v, %v; want 500ms", d, ok)
	}
	if !body.closed.Load() {
		t.Fatal("the refused request's body was not closed")
	}
	if n := hits.Load(); n != 3 {
		t.Fatalf("the vendor received %d requests, want 3", n)
	}
}

// A vendor's 429 with Retry-After (seconds or an HTTP-date) or without
// one (the cooldown's default) stops every RoundTripper sharing the board
// for exactly that long, without sending.
func TestRoundTripperCooldown(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name       string
		retryAfter func(now time.Time) string
		want       time.Duration
	}{
		{"seconds", func(time.Time) string { return "2" }, 2 * time.Second},
		{"date", func(now time.Time) string { return now.Add(3 * time.Second).UTC().Format(http.TimeFormat) }, 3 * time.Second},
		{"none", func(time.Time) string { return "" }, 5 * time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			clk := clock.New(clock.Epoch)
			srv, hits := vendor(t, func(w http.ResponseWriter, n int64) {
				if n == 1 {
					if v := tc.retryAfter(clk.Now()); v != "" {
						w.Header().Set("Retry-After", v)
					}
					w.WriteHeader(http.StatusTooManyRequests)
				}
			})
			board := cooldown.NewMemory()
			var clients [2]*http.Client
			for i := range clients {
				cd := cooldown.New(board, clk, nil)
				cd.Set(&cooldown.Config{Default: 5 * time.Second})
				ic, err := New(WithClock(clk))
				if err != nil {
					t.Fatal(err)
				}
				clients[i] = &http.Client{Transport: ic.RoundTripper(cd, nil)}
			}
			if code, err := outGet(t, clients[0], srv.URL+"/v1/chat"); err != nil || code != 429 {
				t.Fatalf("first call: %d, %v; want the vendor's 429", code, err)
			}
			start := clk.Now()
			for _, at := range []time.Duration{0, tc.want - time.Nanosecond} {
				clk.Set(start.Add(at))
				for i, c := range clients {
					_, err := outGet(t, c, srv.URL+"/v1/other")
					if d, ok := RetryDelay(err, nil); !IsClientThrottled(err) || !ok || d != tc.want-at {
						t.Fatalf("client %d at +%v: %v (delay %v), want refused with %v left", i, at, err, d, tc.want-at)
					}
				}
			}
			clk.Set(start.Add(tc.want))
			for i, c := range clients {
				if code, err := outGet(t, c, srv.URL+"/v1/chat"); err != nil || code != 200 {
					t.Fatalf("client %d when the cooldown ended: %d, %v", i, code, err)
				}
			}
			if n := hits.Load(); n != 3 {
				t.Fatalf("the vendor received %d requests, want 3", n)
			}
		})
	}
}

// An outgoing call made while serving a request is keyed on that
// request's identity: a per-tenant outbound rule limits each tenant
// on its own.
func TestOutboundInheritsIdentity(t *testing.T) {
	t.Parallel()
	clk := clock.New(clock.Epoch)
	lim := outboundLimiter(t, clk, `
rules:
  - name: per-tenant
    key: [tenant]
    rate: 1/1h
`)
	up, hits := vendor(t, func(w http.ResponseWriter, _ int64) {})
	ic, err := New(WithClock(clk), WithTenant(FromHeader("x-tenant")))
	if err != nil {
		t.Fatal(err)
	}
	out := &http.Client{Transport: ic.RoundTripper(lim, nil)}
	in := httptest.NewServer(ic.HTTP(&stage{})(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		req, _ := http.NewRequestWithContext(r.Context(), http.MethodGet, up.URL+"/v1/x", nil)
		resp, err := out.Do(req)
		if err != nil {
			w.WriteHeader(http.StatusTooManyRequests)
			return
		}
		_ = resp.Body.Close()
	})))
	t.Cleanup(in.Close)
	call := func(tenant string) int {
		req, _ := http.NewRequest(http.MethodGet, in.URL, nil)
		req.Header.Set("x-tenant", tenant)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_ = resp.Body.Close()
		return resp.StatusCode
	}
	if got := []int{call("a"), call("a"), call("b")}; got[0] != 200 || got[1] != 429 || got[2] != 200 {
		t.Fatalf("tenants a, a, b: %v, want [200 429 200]", got)
	}
	if n := hits.Load(); n != 2 {
		t.Fatalf("the vendor received %d requests, want 2", n)
	}
}

// exhausted is an Echo server whose Plain answers RESOURCE_EXHAUSTED with
// a pushback of 1500 ms to its first call, and counts calls.
type exhausted struct {
	echoServer
	n atomic.Int64
}

func (e *exhausted) Plain(ctx context.Context, in *testpb.EchoRequest) (*testpb.EchoResponse, error) {
	if e.n.Add(1) == 1 {
		_ = grpc.SetTrailer(ctx, metadata.Pairs(PushbackTrailer, "1500"))
		return nil, status.Error(codes.ResourceExhausted, "vendor quota")
	}
	return &testpb.EchoResponse{Message: in.GetMessage()}, nil
}

// UnaryOutbound and StreamOutbound: a server's RESOURCE_EXHAUSTED with a
// pushback starts a cooldown of the service for every client sharing the
// board, which refuses unary calls and streams without sending them, for
// exactly that long; a rule refuses the same way.
func TestGRPCOutbound(t *testing.T) {
	t.Parallel()
	clk := clock.New(clock.Epoch)
	board := cooldown.NewMemory()
	srv := &exhausted{}
	var clients [2]testpb.EchoClient
	for i := range clients {
		cd := cooldown.New(board, clk, nil)
		cd.Set(&cooldown.Config{})
		ic, err := New(WithClock(clk))
		if err != nil {
			t.Fatal(err)
		}
		cc := startLoopback(t, srv, nil,
			grpc.WithChainUnaryInterceptor(ic.UnaryOutbound(cd)),
			grpc.WithChainStreamInterceptor(ic.StreamOutbound(cd)))
		clients[i] = testpb.NewEchoClient(cc)
	}
	ctx := testCtx(t)
	if _, err := clients[0].Plain(ctx, &testpb.EchoRequest{}); status.Code(err) != codes.ResourceExhausted || IsClientThrottled(err) {
		t.Fatalf("first call: %v, want the server's RESOURCE_EXHAUSTED", err)
	}
	start := clk.Now()
	for _, at := range []time.Duration{0, 1500*time.Millisecond - 1} {
		clk.Set(start.Add(at))
		for i, c := range clients {
			_, err := c.Plain(ctx, &testpb.EchoRequest{})
			if d, ok := RetryDelay(err, nil); !IsClientThrottled(err) || status.Code(err) != codes.ResourceExhausted || !ok || d != 1500*time.Millisecond-at {
				t.Fatalf("client %d at +%v: %v, want refused with %v left", i, at, err, 1500*time.Millisecond-at)
			}
			if _, err := c.Bidi(ctx); !IsClientThrottled(err) {
				t.Fatalf("client %d stream at +%v: %v, want refused", i, at, err)
			}
		}
	}
	clk.Set(start.Add(1500 * time.Millisecond))
	for i, c := range clients {
		if _, err := c.Plain(ctx, &testpb.EchoRequest{}); err != nil {
			t.Fatalf("client %d when the cooldown ended: %v", i, err)
		}
	}
	if n := srv.n.Load(); n != 3 {
		t.Fatalf("the server received %d calls, want 3", n)
	}

	// A rule on the full method.
	lim := outboundLimiter(t, clk, `
rules:
  - name: echo
    match: {method: "/floodgate.test.v1.Echo/*"}
    rate: 1/1s
`)
	ic, _ := New(WithClock(clk))
	cc := startLoopback(t, &echoServer{}, nil, grpc.WithChainUnaryInterceptor(ic.UnaryOutbound(lim)))
	c := testpb.NewEchoClient(cc)
	if _, err := c.Plain(ctx, &testpb.EchoRequest{}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Plain(ctx, &testpb.EchoRequest{}); !IsClientThrottled(err) {
		t.Fatalf("second call: %v, want refused by the rule", err)
	}
}

func TestParseRetryAfter(t *testing.T) {
	t.Parallel()
	now := clock.Epoch
	for v, want := range map[string]time.Duration{
		"2":   2 * time.Second,
		" 7 ": 7 * time.Second,
		now.Add(90 * time.Second).Format(http.TimeFormat): 90 * time.Second,
		now.Add(-time.Second).Format(http.TimeFormat):     0,
		"0":                    0,
		"-1":                   0,
		"soon":                 0,
		"":                     0,
		"1.5":                  0,
		"99999999999999999999": 0,
		"100000":               24 * time.Hour,
	} {
		got, ok := parseRetryAfter(v, now)
		if got != want || ok != (want > 0) {
			t.Errorf("parseRetryAfter(%q) = %v, %v; want %v", v, got, ok, want)
		}
	}
}
