package connectmw_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/connectmw"
	"github.com/floodgate-go/floodgate/interceptor"
	"github.com/floodgate-go/floodgate/internal/testpb"
)

// wantDenial is what a Connect client reads back from a per-user denial
// of the third call in a minute: the details of interceptor.DenyStatus
// and, as metadata, the pushback and the HTTP fields.
func checkDenial(t *testing.T, err error, wantMsg string) {
	t.Helper()
	var ce *connect.Error
	if !errors.As(err, &ce) {
		t.Fatalf("error %v is no *connect.Error", err)
	}
	if ce.Code() != connect.CodeResourceExhausted || ce.Message() != wantMsg {
		t.Fatalf("error = %v %q, want resource_exhausted %q", ce.Code(), ce.Message(), wantMsg)
	}
	want := []proto.Message{
		&errdetails.ErrorInfo{Reason: "RATE_LIMIT_EXCEEDED", Domain: "echo.example", Metadata: map[string]string{
			"stage": "tiers", "policy": "per-user", "limit": "2", "window_seconds": "60",
		}},
		&errdetails.RetryInfo{RetryDelay: durationpb.New(30 * time.Second)},
		&errdetails.QuotaFailure{Violations: []*errdetails.QuotaFailure_Violation{{
			Subject: "per-user", QuotaId: "per-user", QuotaValue: 2, Description: "rate limit of 2 per 1m0s exceeded",
		}}},
	}
	if len(ce.Details()) != len(want) {
		t.Fatalf("%d details, want %d", len(ce.Details()), len(want))
	}
	for i, d := range ce.Details() {
		got, err := d.Value()
		if err != nil {
			t.Fatalf("detail %d (%s): %v", i, d.Type(), err)
		}
		if !proto.Equal(got, want[i]) {
			t.Errorf("detail %d = %v, want %v", i, got, want[i])
		}
	}
	for k, v := range map[string]string{
		interceptor.PushbackTrailer: "30000",
		"Retry-After":               "30",
		"RateLimit-Policy":          `"per-user";q=2;w=60`,
		"RateLimit":                 `"per-user";r=0;t=30`,
	} {
		if got := ce.Meta().Values(k); len(got) != 1 || got[0] != v {
			t.Errorf("metadata %s = %q, want %q", k, got, v)
		}
	}
	if d, ok := connectmw.RetryDelay(err); !ok || d != 30*time.Second {
		t.Errorf("RetryDelay = %v, %v; want 30s", d, ok)
	}
}

// TestDenialPerProtocol: in each of Connect's protocols, a Connect client
// reads back a rate-limit denial of a unary call, of a server stream and
// of a bidi stream with its code, message, ErrorInfo, RetryInfo,
// QuotaFailure, pushback and HTTP fields; another user's calls pass.
func TestDenialPerProtocol(t *testing.T) {
	t.Parallel()
	const msg = `rate limit exceeded (policy "per-user"); retry after 30s`
	for _, p := range protocols {
		t.Run(p.name, func(t *testing.T) {
			fg := mustInterceptor(interceptor.WithDomain("echo.example"), interceptor.WithUser(interceptor.FromHeader("x-user")))
			guard, err := connectmw.NewHandler(fg, perUser(t))
			if err != nil {
				t.Fatal(err)
			}
			srv := serve(t, connect.WithInterceptors(guard))
			ctx := testCtx(t)
			plain := unaryClient(srv, plainProc, p.opt...)
			call := func(user string) (*connect.Response[testpb.EchoResponse], error) {
				req := connect.NewRequest(&testpb.EchoRequest{Message: "hi"})
				req.Header().Set("x-user", user)
				return plain.CallUnary(ctx, req)
			}
			for i := range 2 {
				resp, err := call("alice")
				if err != nil || resp.Msg.GetMessage() != "hi" {
					t.Fatalf("call %d: %v, %v", i+1, resp, err)
				}
			}
			_, err = call("alice")
			checkDenial(t, err, msg)

			stream := connect.NewClient[testpb.EchoRequest, testpb.EchoResponse](srv.Client(), srv.URL+streamProc, p.opt...)
			req := connect.NewRequest(&testpb.EchoRequest{Message: "s"})
			req.Header().Set("x-user", "alice")
			ss, err := stream.CallServerStream(ctx, req)
			if err != nil {
				checkDenial(t, err, msg)
			} else {
				if ss.Receive() {
					t.Fatal("a denied stream received a message")
				}
				checkDenial(t, ss.Err(), msg)
				_ = ss.Close()
			}

			bidi := connect.NewClient[testpb.EchoRequest, testpb.EchoResponse](srv.Client(), srv.URL+bidiProc, p.opt...)
			bs := bidi.CallBidiStream(ctx)
			bs.RequestHeader().Set("x-user", "alice")
			_ = bs.Send(&testpb.EchoRequest{Message: "b"})
			_ = bs.CloseRequest()
			if _, err := bs.Receive(); err == nil {
				t.Fatal("a denied bidi stream received a message")
			} else {
				checkDenial(t, err, msg)
			}
			_ = bs.CloseResponse()

			// bob has a bucket of his own, streams included.
			if _, err := call("bob"); err != nil {
				t.Fatalf("bob: %v", err)
			}
			req = connect.NewRequest(&testpb.EchoRequest{Message: "s"})
			req.Header().Set("x-user", "bob")
			ss, err = stream.CallServerStream(ctx, req)
			if err != nil {
				t.Fatal(err)
			}
			n := 0
			for ss.Receive() {
				n++
			}
			if ss.Err() != nil || n != 2 {
				t.Fatalf("bob's stream: %d messages, %v", n, ss.Err())
			}
			_ = ss.Close()
			if _, err := call("bob"); err == nil {
				t.Fatal("bob's third call in a minute passed")
			}
		})
	}
}

// recorder keeps every Request and Decision its stages saw.
type recorder struct {
	reqs []floodgate.Request
}

func (r *recorder) Observe(_ context.Context, req *floodgate.Request, _ floodgate.Decision, _ error) {
	r.reqs = append(r.reqs, *req)
}

// TestRequestOfACall: a call's Request is built as for the same gRPC
// method: the procedure as Method, the proto annotation's cost and
// priority, the user from the header and the loopback peer as IP.
func TestRequestOfACall(t *testing.T) {
	t.Parallel()
	rec := &recorder{}
	fg := mustInterceptor(interceptor.WithUser(interceptor.FromHeader("x-user")), interceptor.WithObserver(rec))
	guard, err := connectmw.NewHandler(fg, &script{})
	if err != nil {
		t.Fatal(err)
	}
	srv := serve(t, connect.WithInterceptors(guard))
	req := connect.NewRequest(&testpb.EchoRequest{Message: "x"})
	req.Header().Set("x-user", "carol")
	if _, err := unaryClient(srv, expensiveProc).CallUnary(testCtx(t), req); err != nil {
		t.Fatal(err)
	}
	if len(rec.reqs) != 1 {
		t.Fatalf("%d decisions, want 1", len(rec.reqs))
	}
	r := rec.reqs[0]
	if r.Method != expensiveProc || r.Cost != 10 || r.Priority != floodgate.PriorityCritical ||
		r.Identity.User != "carol" || r.Identity.IP.String() != "127.0.0.1" {
		t.Fatalf("request = %+v", r)
	}
}

// TestDoneOutcomes: each admitted call's Done runs once with the outcome
// of how it ended: success, an overload signal (dropped), another error
// (failed), a panic (ignored); and a call a later floodgate stage denied
// releases the earlier stage as ignored.
func TestDoneOutcomes(t *testing.T) {
	t.Parallel()
	const anyError connect.Code = 1000
	first := &script{}
	later := &script{deny: 1, retry: time.Second}
	fg := mustInterceptor()
	g1, err1 := connectmw.NewHandler(fg, first)
	g2, err2 := connectmw.NewHandler(fg, later)
	if err := errors.Join(err1, err2); err != nil {
		t.Fatal(err)
	}
	// No connect.WithRecover: the panic passes the interceptors (net/http
	// recovers it and resets the stream).
	srv := serve(t, connect.WithInterceptors(g1, g2))
	c := unaryClient(srv, plainProc)
	ctx := testCtx(t)
	for _, tc := range []struct {
		msg  string
		code connect.Code // 0: success; anyError: any error
	}{
		{"ok", connect.CodeUnavailable}, // the later stage's denial
		{"ok", 0},
		{"unavailable", connect.CodeUnavailable},
		{"invalid", connect.CodeInvalidArgument},
		{"panic", anyError},
	} {
		_, err := c.CallUnary(ctx, connect.NewRequest(&testpb.EchoRequest{Message: tc.msg}))
		if got := connect.CodeOf(err); (tc.code == 0 && err != nil) || (tc.code != 0 && tc.code != anyError && got != tc.code) || (tc.code == anyError && err == nil) {
			t.Fatalf("%s: %v, want code %v", tc.msg, err, tc.code)
		}
	}
	_, res := first.snapshot()
	want := []floodgate.Outcome{floodgate.OutcomeIgnored, floodgate.OutcomeSuccess, floodgate.OutcomeDropped, floodgate.OutcomeFailed, floodgate.OutcomeIgnored}
	if len(res) != len(want) {
		t.Fatalf("first stage: %d results, want %d", len(res), len(want))
	}
	for i, r := range res {
		if r.Outcome != want[i] {
			t.Errorf("first stage, call %d: outcome %v, want %v", i+1, r.Outcome, want[i])
		}
	}
	if _, res := later.snapshot(); len(res) != 4 {
		t.Errorf("later stage: %d results, want 4 (its denial holds nothing)", len(res))
	}
}

// TestPerMessage: with WithPerMessage every message a client sends on a
// bidi stream is charged; the one the limit denies ends the stream with
// the denial, in every protocol.
func TestPerMessage(t *testing.T) {
	t.Parallel()
	for _, p := range protocols {
		t.Run(p.name, func(t *testing.T) {
			fg := mustInterceptor(interceptor.WithDomain("echo.example"), interceptor.WithUser(interceptor.FromHeader("x-user")), interceptor.WithPerMessage())
			guard, err := connectmw.NewHandler(fg, perUser(t))
			if err != nil {
				t.Fatal(err)
			}
			srv := serve(t, connect.WithInterceptors(guard))
			bidi := connect.NewClient[testpb.EchoRequest, testpb.EchoResponse](srv.Client(), srv.URL+bidiProc, p.opt...)
			bs := bidi.CallBidiStream(testCtx(t))
			bs.RequestHeader().Set("x-user", "dave")
			// The stream's opening takes one of two tokens, the first
			// message the other; the second message is denied.
			if err := bs.Send(&testpb.EchoRequest{Message: "1"}); err != nil {
				t.Fatal(err)
			}
			if m, err := bs.Receive(); err != nil || m.GetMessage() != "1" {
				t.Fatalf("first message: %v, %v", m, err)
			}
			_ = bs.Send(&testpb.EchoRequest{Message: "2"})
			_, err = bs.Receive()
			checkDenial(t, err, `rate limit exceeded (policy "per-user"); retry after 30s`)
			_ = bs.CloseRequest()
			_ = bs.CloseResponse()
		})
	}
}

// TestPerMessageOutcome: a stream whose message its own stage denied ends
// as an overload signal for that stage (dropped), not as a later stage's
// denial (ignored), as with fg.StreamServer.
func TestPerMessageOutcome(t *testing.T) {
	t.Parallel()
	s := &script{from: 2} // the stream opens, its first message is shed
	guard, err := connectmw.NewHandler(mustInterceptor(interceptor.WithPerMessage()), s)
	if err != nil {
		t.Fatal(err)
	}
	srv := serve(t, connect.WithInterceptors(guard))
	bidi := connect.NewClient[testpb.EchoRequest, testpb.EchoResponse](srv.Client(), srv.URL+bidiProc)
	bs := bidi.CallBidiStream(testCtx(t))
	_ = bs.Send(&testpb.EchoRequest{Message: "1"})
	if _, err := bs.Receive(); connect.CodeOf(err) != connect.CodeUnavailable {
		t.Fatalf("first message: %v", err)
	}
	_ = bs.CloseRequest()
	_ = bs.CloseResponse()
	var res []floodgate.Result
	waitFor(t, "the stream's Done", func() bool { // it runs after the client saw the end
		_, res = s.snapshot()
		return len(res) > 0
	})
	if len(res) != 1 || res[0].Outcome != floodgate.OutcomeDropped {
		t.Fatalf("results = %+v, want one dropped", res)
	}
}

// TestServerTiming: a call a rule held before letting it proceed
// (max_wait) tells how long in its response's Server-Timing header, unary
// calls and streams, in every protocol.
func TestServerTiming(t *testing.T) {
	t.Parallel()
	guard, err := connectmw.NewHandler(mustInterceptor(), &script{waited: 250 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	srv := serve(t, connect.WithInterceptors(guard))
	for _, p := range protocols {
		resp, err := unaryClient(srv, plainProc, p.opt...).CallUnary(testCtx(t), connect.NewRequest(&testpb.EchoRequest{}))
		if err != nil {
			t.Fatal(err)
		}
		if got := resp.Header().Values("Server-Timing"); len(got) != 1 || got[0] != "floodgate-wait;dur=250" {
			t.Errorf("%s unary: Server-Timing %q", p.name, got)
		}
		h, err := streamHeader(t, srv, p.opt...)
		if got := h.Values("Server-Timing"); err != nil || len(got) != 1 || got[0] != "floodgate-wait;dur=250" {
			t.Errorf("%s stream: Server-Timing %q, %v", p.name, got, err)
		}
	}
}

// TestSoftExceeded: a call admitted over soft limits names them in its
// response's X-RateLimit-Soft-Exceeded header, unary calls and streams,
// in every protocol, and its handler reads them on its Request.
func TestSoftExceeded(t *testing.T) {
	t.Parallel()
	guard, err := connectmw.NewHandler(mustInterceptor(), &script{soft: "plan,burst"})
	if err != nil {
		t.Fatal(err)
	}
	srv := serve(t, connect.WithInterceptors(guard))
	const want = `"plan", "burst"`
	for _, p := range protocols {
		resp, err := unaryClient(srv, plainProc, p.opt...).CallUnary(testCtx(t), connect.NewRequest(&testpb.EchoRequest{Message: "soft?"}))
		if err != nil {
			t.Fatal(err)
		}
		if got := resp.Header().Values("X-RateLimit-Soft-Exceeded"); len(got) != 1 || got[0] != want {
			t.Errorf("%s unary: X-RateLimit-Soft-Exceeded %q, want %s", p.name, got, want)
		}
		if got := resp.Msg.GetMessage(); got != "plan,burst" {
			t.Errorf("%s unary: the handler's Request.SoftExceeded is %q, want plan,burst", p.name, got)
		}
		h, err := streamHeader(t, srv, p.opt...)
		if got := h.Values("X-RateLimit-Soft-Exceeded"); err != nil || len(got) != 1 || got[0] != want {
			t.Errorf("%s stream: X-RateLimit-Soft-Exceeded %q, %v", p.name, got, err)
		}
	}
}

// streamHeader calls the server stream of srv with opts, reads it to its
// end, and returns its response header and how it ended.
func streamHeader(t *testing.T, srv *httptest.Server, opts ...connect.ClientOption) (http.Header, error) {
	t.Helper()
	stream := connect.NewClient[testpb.EchoRequest, testpb.EchoResponse](srv.Client(), srv.URL+streamProc, opts...)
	ss, err := stream.CallServerStream(testCtx(t), connect.NewRequest(&testpb.EchoRequest{}))
	if err != nil {
		t.Fatal(err)
	}
	defer ss.Close()
	for ss.Receive() {
	}
	return ss.ResponseHeader(), ss.Err()
}

// TestDenyResponseMessage: WithDenyResponse's Message replaces a Connect
// denial's message; its code, details and metadata stay.
func TestDenyResponseMessage(t *testing.T) {
	t.Parallel()
	fg := mustInterceptor(interceptor.WithDomain("echo.example"), interceptor.WithUser(interceptor.FromHeader("x-user")),
		interceptor.WithDenyResponse(interceptor.DenyResponse{Message: func(_ context.Context, d floodgate.Decision) string {
			return "E_QUOTA: slow down for " + d.RetryAfter.String()
		}}))
	guard, err := connectmw.NewHandler(fg, perUser(t))
	if err != nil {
		t.Fatal(err)
	}
	srv := serve(t, connect.WithInterceptors(guard))
	for _, p := range protocols {
		c := unaryClient(srv, plainProc, p.opt...)
		req := connect.NewRequest(&testpb.EchoRequest{})
		req.Header().Set("x-user", p.name) // a bucket per protocol
		var err error
		for range 3 {
			_, err = c.CallUnary(testCtx(t), req)
		}
		checkDenial(t, err, "E_QUOTA: slow down for 30s")
	}
}

func TestNewHandlerRefusesNil(t *testing.T) {
	t.Parallel()
	if _, err := connectmw.NewHandler(nil, &script{}); err == nil || err.Error() != "connectmw: NewHandler: nil Interceptor" {
		t.Errorf("nil Interceptor: %v", err)
	}
	if _, err := connectmw.NewHandler(mustInterceptor(), nil); err == nil || err.Error() != "connectmw: NewHandler: nil Admitter" {
		t.Errorf("nil Admitter: %v", err)
	}
	if _, err := connectmw.NewHandler(nil, nil); err == nil || err.Error() != "connectmw: NewHandler: nil Interceptor\nconnectmw: NewHandler: nil Admitter" {
		t.Errorf("both nil: %v", err)
	}
	// A rule keyed on the user, and no user extractor: refused under
	// WithStrictIdentity.
	_, err := connectmw.NewHandler(mustInterceptor(interceptor.WithStrictIdentity()), perUser(t))
	if err == nil || !strings.HasPrefix(err.Error(), "connectmw: NewHandler: interceptor: WithStrictIdentity: ") || !strings.Contains(err.Error(), "per-user") {
		t.Errorf("strict identity: %v", err)
	}
	if _, err := connectmw.NewClient(interceptor.WithMaxAttempts(0)); err == nil || err.Error() != "interceptor: WithMaxAttempts(0): want at least 1" {
		t.Errorf("bad client option: %v", err)
	}
}

// TestConnectProtocolOverPlainHTTP: a plain HTTP client of the Connect
// protocol (curl, a browser's fetch) gets a denial as 429 with
// Retry-After and the RateLimit fields, and the error's code in the JSON
// body.
func TestConnectProtocolOverPlainHTTP(t *testing.T) {
	t.Parallel()
	fg := mustInterceptor(interceptor.WithUser(interceptor.FromHeader("x-user")))
	guard, err := connectmw.NewHandler(fg, perUser(t))
	if err != nil {
		t.Fatal(err)
	}
	srv := serve(t, connect.WithInterceptors(guard))
	post := func() (*http.Response, string) {
		req, err := http.NewRequestWithContext(testCtx(t), "POST", srv.URL+plainProc, strings.NewReader(`{"message":"hi"}`))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("X-User", "gina")
		resp, err := srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp, string(b)
	}
	for range 2 {
		if resp, body := post(); resp.StatusCode != 200 || body != `{"message":"hi"}` {
			t.Fatalf("allowed: %d %s", resp.StatusCode, body)
		}
	}
	resp, body := post()
	if resp.StatusCode != http.StatusTooManyRequests || !strings.HasPrefix(body, `{"code":"resource_exhausted","message":"rate limit exceeded (policy \"per-user\"); retry after 30s","details":[`) {
		t.Fatalf("denied: %d %s", resp.StatusCode, body)
	}
	for k, v := range map[string]string{"Retry-After": "30", "RateLimit-Policy": `"per-user";q=2;w=60`, "RateLimit": `"per-user";r=0;t=30`, interceptor.PushbackTrailer: "30000"} {
		if got := resp.Header.Values(k); len(got) != 1 || got[0] != v {
			t.Errorf("%s = %q, want %q", k, got, v)
		}
	}
}
