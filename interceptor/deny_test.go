package interceptor

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/internal/seam"
	"github.com/floodgate-go/floodgate/internal/testpb"
)

// keyDeny is the denial of every call by denyStage: a rate limit of 10 a
// minute, spent, the next unit in 1.5 s.
var keyDeny = floodgate.Decision{Stage: floodgate.StageTiers, Source: floodgate.SourceStore, Policy: "per-key",
	Limit: 10, Window: time.Minute, Remaining: 0, RetryAfter: 1500 * time.Millisecond, Reset: 40 * time.Second}

func denyStage() *stage {
	return &stage{decide: func(*floodgate.Request) (floodgate.Decision, error) { return keyDeny, nil }}
}

// The fields every HTTP denial of keyDeny keeps, whoever writes its body.
var keyDenyFields = map[string][]string{
	"Retry-After":      {"2"},
	"RateLimit-Policy": {`"per-key";q=10;w=60`},
	"RateLimit":        {`"per-key";r=0;t=2`},
	"Cache-Control":    {"no-store"},
}

// kong is a DenyResponse in Kong's format: its error_code as the status,
// its error_message in the body and as the gRPC message.
var kong = DenyResponse{
	Status: http.StatusServiceUnavailable,
	Body: func(context.Context, floodgate.Decision) []byte {
		return []byte(`{"message":"API rate limit exceeded"}`)
	},
	Message: func(context.Context, floodgate.Decision) string { return "API rate limit exceeded" },
}

func serveDeny(t *testing.T, opts ...Option) *httptest.Server {
	t.Helper()
	mux := http.NewServeMux()
	mux.Handle("GET /v1/items/{id}", mustHTTP(denyStage(), opts...)(http.HandlerFunc(okHandler)))
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return srv
}

// TestDenyResponseHTTP: WithDenyResponse writes the status and body it
// says, with its content type, and every denial keeps Retry-After, the
// RateLimit fields, the legacy fields when asked and Cache-Control.
func TestDenyResponseHTTP(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name        string
		r           DenyResponse
		status      int
		contentType []string
		body        string
	}{
		{"kong", kong, 503, []string{"application/json"}, `{"message":"API rate limit exceeded"}`},
		{"status only: the problem body, with that status", DenyResponse{Status: 420}, 420, []string{"application/problem+json"},
			`{"type":"https://iana.org/assignments/http-problem-types#quota-exceeded","title":"Request cannot be satisfied as assigned quota has been exceeded","status":420,"detail":"rate limit exceeded; retry after 2 seconds","violated-policies":["per-key"]}` + "\n"},
		{"body from the request and decision, the stage's status", DenyResponse{
			ContentType: "application/vnd.api+json",
			Body: func(ctx context.Context, d floodgate.Decision) []byte {
				r, _ := floodgate.FromContext(ctx)
				return []byte(`{"errors":[{"code":"` + d.Policy + `","detail":"` + r.Method + `","meta":{"retry_ms":` + strconv.FormatInt(d.RetryAfter.Milliseconds(), 10) + `}}]}`)
			},
		}, 429, []string{"application/vnd.api+json"}, `{"errors":[{"code":"per-key","detail":"GET /v1/items/{id}","meta":{"retry_ms":1500}}]}`},
		{"no body", DenyResponse{Status: 429, Body: func(context.Context, floodgate.Decision) []byte { return nil }}, 429, nil, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := serveDeny(t, WithDenyResponse(tc.r), WithLegacyHeaders(), WithClock(fixedClock{}))
			res := get(t, srv, "GET", "/v1/items/7")
			if res.status != tc.status || res.body != tc.body {
				t.Fatalf("got %d %q, want %d %q", res.status, res.body, tc.status, tc.body)
			}
			checkHeader(t, res.header, keyDenyFields)
			checkHeader(t, res.header, map[string][]string{
				"Content-Type":          tc.contentType,
				"Content-Length":        {strconv.Itoa(len(tc.body))},
				"X-RateLimit-Limit":     {"10"},
				"X-RateLimit-Remaining": {"0"},
				"X-RateLimit-Reset":     {strconv.FormatInt(fixedNow.Unix()+2, 10)},
			})
		})
	}
}

var fixedNow = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

type fixedClock struct{}

func (fixedClock) Now() time.Time                         { return fixedNow }
func (fixedClock) After(d time.Duration) <-chan time.Time { return time.After(d) }

// TestDenyResponseLaterStage: a later stage's custom denial still releases
// the earlier stage's admission as ignored, not as a failure.
func TestDenyResponseLaterStage(t *testing.T) {
	t.Parallel()
	first := &stage{}
	fg := MustNew(WithDenyResponse(kong))
	h := fg.HTTP(first)(fg.HTTP(denyStage())(http.HandlerFunc(okHandler)))
	mux := http.NewServeMux()
	mux.Handle("GET /x", h)
	srv := httptest.NewServer(mux)
	defer srv.Close()
	if res := get(t, srv, "GET", "/x"); res.status != 503 {
		t.Fatalf("status %d", res.status)
	}
	if got := first.finished(); len(got) != 1 || got[0] != floodgate.Ignored {
		t.Fatalf("first stage's results = %+v, want [Ignored]", got)
	}
}

// TestDenyResponseGRPC: the Message replaces the gRPC status message of a
// unary call's and a stream's denial; the code, the details and the
// pushback trailer are DenyStatus's.
func TestDenyResponseGRPC(t *testing.T) {
	t.Parallel()
	fg := MustNew(WithDenyResponse(kong), WithDomain("x.example"))
	c := testpb.NewEchoClient(startBufconn(t, &echoServer{}, []grpc.ServerOption{
		grpc.ChainUnaryInterceptor(fg.UnaryServer(denyStage())),
		grpc.ChainStreamInterceptor(fg.StreamServer(denyStage())),
	}))
	want := DenyStatus(keyDeny, "x.example").Proto()
	want.Message = "API rate limit exceeded"
	check := func(what string, err error, trailer metadata.MD) {
		t.Helper()
		if got := status.Convert(err).Proto(); !proto.Equal(got, want) {
			t.Errorf("%s: status %v, want %v", what, got, want)
		}
		if got := trailer.Get(PushbackTrailer); len(got) != 1 || got[0] != "1500" {
			t.Errorf("%s: pushback %q, want 1500", what, got)
		}
	}
	var trailer metadata.MD
	_, err := c.Plain(testCtx(t), &testpb.EchoRequest{}, grpc.Trailer(&trailer))
	check("unary", err, trailer)
	ss, err := c.ServerStream(testCtx(t), &testpb.EchoRequest{})
	if err != nil {
		t.Fatal(err)
	}
	_, err = ss.Recv()
	check("stream", err, ss.Trailer())
	if status.Code(err) != codes.ResourceExhausted {
		t.Errorf("code %v", status.Code(err))
	}
}

// TestDenyResponseErrors: New names every bad DenyResponse.
func TestDenyResponseErrors(t *testing.T) {
	t.Parallel()
	body := func(context.Context, floodgate.Decision) []byte { return nil }
	for _, tc := range []struct {
		r    DenyResponse
		want string
	}{
		{DenyResponse{}, "interceptor: WithDenyResponse: sets nothing: give a Status, a Body or a Message"},
		{DenyResponse{Status: 200, Body: body}, "interceptor: WithDenyResponse: Status 200 is not a 4xx or 5xx status"},
		{DenyResponse{Status: 600}, "interceptor: WithDenyResponse: Status 600 is not a 4xx or 5xx status"},
		{DenyResponse{Status: 429, ContentType: "text/plain"}, `interceptor: WithDenyResponse: ContentType "text/plain" without a Body`},
		{DenyResponse{Body: body, ContentType: "json"}, `interceptor: WithDenyResponse: ContentType "json" is not a media type (type/subtype)`},
		{DenyResponse{Body: body, ContentType: "text/plain; charset"}, `interceptor: WithDenyResponse: ContentType "text/plain; charset" is not a media type (type/subtype)`},
		{DenyResponse{Status: 399, ContentType: "x"}, "interceptor: WithDenyResponse: Status 399 is not a 4xx or 5xx status\n" +
			`interceptor: WithDenyResponse: ContentType "x" without a Body`},
	} {
		_, err := New(WithDenyResponse(tc.r))
		if err == nil || err.Error() != tc.want {
			t.Errorf("New(WithDenyResponse(%+v)) = %v, want %q", tc.r, err, tc.want)
		}
	}
}

// TestDenialMatchesTransports: a Gate's Denial is what the transports
// send for the same decision: the HTTP fields of the HTTP denial (less its
// body's), the gRPC status of UnaryServer, and its pushback.
func TestDenialMatchesTransports(t *testing.T) {
	t.Parallel()
	fg := MustNew(WithDenyResponse(kong), WithDomain("x.example"))
	ctx, done, den := mustGate(t, fg, denyStage()).Admit(context.Background(), seam.Call{Method: "/floodgate.test.v1.Echo/Plain", RemoteAddr: "192.0.2.1:4000"})
	if done != nil || den == nil {
		t.Fatalf("Admit: done %v, denial %v", done != nil, den)
	}
	if r, ok := floodgate.FromContext(ctx); !ok || r.Identity.IP.String() != "192.0.2.1" || r.Method != "/floodgate.test.v1.Echo/Plain" {
		t.Fatalf("request = %+v", r)
	}
	if len(den.Header) != len(keyDenyFields) {
		t.Errorf("header %v has other fields than %v", den.Header, keyDenyFields)
	}
	checkHeader(t, den.Header, keyDenyFields)
	want := DenyStatus(keyDeny, "x.example").Proto()
	want.Message = "API rate limit exceeded"
	if !proto.Equal(den.Status.Proto(), want) || den.Pushback != "1500" {
		t.Errorf("denial = %v, pushback %q", den.Status.Proto(), den.Pushback)
	}
	// Health checks and skipped methods are not admitted at all.
	s := &stage{}
	g := mustGate(t, MustNew(WithSkip(func(m string) bool { return strings.HasSuffix(m, "/Free") })), s)
	for _, m := range []string{"/grpc.health.v1.Health/Check", "/x.Svc/Free"} {
		if _, done, den := g.Admit(context.Background(), seam.Call{Method: m}); done != nil || den != nil {
			t.Errorf("%s: admitted", m)
		}
	}
	if s.admits.Load() != 0 {
		t.Errorf("%d admissions of exempt calls", s.admits.Load())
	}
}
