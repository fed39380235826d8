package shedder_test

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/emptypb"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/interceptor"
	"github.com/floodgate-go/floodgate/shedder"
)

// hold admits n critical requests (never shed) and returns their Dones.
func hold(t *testing.T, s *shedder.Shedder, n int) []floodgate.Done {
	t.Helper()
	dones := make([]floodgate.Done, n)
	for i := range dones {
		d, done, _ := s.Admit(ctx, &floodgate.Request{Priority: floodgate.PriorityCritical})
		if !d.Allowed {
			t.Fatalf("critical request %d shed: %+v", i, d)
		}
		dones[i] = done
	}
	return dones
}

func retryOf(p floodgate.Priority, name, value string) *floodgate.Request {
	return &floodgate.Request{Priority: p, Headers: []floodgate.Header{{Name: name, Value: value}}}
}

// Exactly where retries are shed, capacity 100 and the default thresholds
// (test 70, read 80, write 90) and margin (5): a read retry from 75 in
// flight, a first-attempt read from 80; the order of shedding is test
// retries, test, read retries, read, write retries, write, and critical
// traffic is never shed, retried or not. What tells a retry:
// grpc-previous-rpc-attempts above 0, the attempt header above 1; a value
// that is no whole number tells nothing.
func TestRetriesShedFirst(t *testing.T) {
	t.Parallel()
	s, err := shedder.New(100, shedder.WithHysteresis(0, 0), shedder.WithRetries(shedder.Retries{AttemptHeader: "x-envoy-attempt-count"}))
	if err != nil {
		t.Fatal(err)
	}
	const grpcAttempts = "grpc-previous-rpc-attempts"
	for _, tc := range []struct {
		inflight int
		req      *floodgate.Request
		allowed  bool
		policy   string
	}{
		{64, retryOf(floodgate.PriorityTest, grpcAttempts, "1"), true, ""},
		{65, retryOf(floodgate.PriorityTest, grpcAttempts, "1"), false, "shedder.retries"},
		{65, &floodgate.Request{Priority: floodgate.PriorityTest}, true, ""},
		{70, &floodgate.Request{Priority: floodgate.PriorityTest}, false, "shedder"},
		{74, retryOf(floodgate.PriorityRead, grpcAttempts, "2"), true, ""},
		{75, retryOf(floodgate.PriorityRead, grpcAttempts, "2"), false, "shedder.retries"},
		{75, retryOf(floodgate.PriorityRead, grpcAttempts, "0"), true, ""},
		{75, retryOf(floodgate.PriorityRead, grpcAttempts, "-1"), true, ""},
		{75, retryOf(floodgate.PriorityRead, grpcAttempts, "two"), true, ""},
		{75, retryOf(floodgate.PriorityRead, "x-envoy-attempt-count", "1"), true, ""},
		{75, retryOf(floodgate.PriorityRead, "x-envoy-attempt-count", "2"), false, "shedder.retries"},
		{75, retryOf(floodgate.PriorityRead, "x-other", "2"), true, ""},
		{79, &floodgate.Request{Priority: floodgate.PriorityRead}, true, ""},
		{80, &floodgate.Request{Priority: floodgate.PriorityRead}, false, "shedder"},
		{84, retryOf(floodgate.PriorityWrite, grpcAttempts, "1"), true, ""},
		{85, retryOf(floodgate.PriorityWrite, grpcAttempts, "1"), false, "shedder.retries"},
		{89, &floodgate.Request{Priority: floodgate.PriorityWrite}, true, ""},
		{90, &floodgate.Request{Priority: floodgate.PriorityWrite}, false, "shedder"},
		{150, retryOf(floodgate.PriorityCritical, grpcAttempts, "3"), true, ""},
	} {
		dones := hold(t, s, tc.inflight)
		d, done, _ := s.Admit(ctx, tc.req)
		if d.Allowed != tc.allowed || d.Policy != tc.policy {
			t.Errorf("%d in flight, %v %v: allowed %v policy %q; want %v %q", tc.inflight, tc.req.Priority, tc.req.Headers, d.Allowed, d.Policy, tc.allowed, tc.policy)
		}
		if done != nil {
			done(floodgate.Result{})
		}
		for _, d := range dones {
			d(floodgate.Result{})
		}
		if n := s.InFlight(); n != 0 {
			t.Fatalf("%d in flight after the case", n)
		}
	}
}

// Retries follow a reload: Reconfigure turns them on, moves their margin
// and turns them off, Config reports them, RequestHeaders names what the
// transport must copy (the same slice while the header is the same), and
// bad settings are refused with their field, changing nothing.
func TestRetriesReconfigure(t *testing.T) {
	t.Parallel()
	s, err := shedder.New(100, shedder.WithHysteresis(0, 0))
	if err != nil {
		t.Fatal(err)
	}
	if h := s.RequestHeaders(); h != nil || s.Config().Retries != nil {
		t.Fatalf("without retries: headers %v, config %+v", h, s.Config().Retries)
	}
	readRetry := retryOf(floodgate.PriorityRead, "grpc-previous-rpc-attempts", "1")
	shedAt := func(n int) bool {
		dones := hold(t, s, n)
		defer func() {
			for _, d := range dones {
				d(floodgate.Result{})
			}
		}()
		d, done, _ := s.Admit(ctx, readRetry)
		if done != nil {
			done(floodgate.Result{})
		}
		return !d.Allowed
	}
	if shedAt(79) || !shedAt(80) {
		t.Fatal("without retries, a read retry must be shed as a read (from 80)")
	}
	c := s.Config()
	c.Retries = &shedder.Retries{Margin: 0.1}
	if err := s.Reconfigure(c); err != nil {
		t.Fatal(err)
	}
	h := s.RequestHeaders()
	if len(h) != 1 || h[0] != "grpc-previous-rpc-attempts" {
		t.Fatalf("RequestHeaders %v", h)
	}
	if shedAt(69) || !shedAt(70) {
		t.Fatal("margin 0.1: a read retry must be shed from 70")
	}
	if got := s.Config().Retries; got == nil || got.Margin != 0.1 {
		t.Fatalf("Config().Retries = %+v", got)
	}
	c.Retries = &shedder.Retries{Margin: 0.05}
	if err := s.Reconfigure(c); err != nil {
		t.Fatal(err)
	}
	if h2 := s.RequestHeaders(); &h2[0] != &h[0] {
		t.Fatal("the same headers must come in the same slice (the transport caches by it)")
	}
	for _, bad := range []struct {
		r    shedder.Retries
		want string
	}{
		{shedder.Retries{Margin: 0.5}, "retries.margin: 0.5 is out of range (0, 0.5)"},
		{shedder.Retries{Margin: 0.7}, "retries.margin"},
		{shedder.Retries{AttemptHeader: "X-Attempt"}, `retries.attempt_header: "X-Attempt" is not a lower-case header name`},
		{shedder.Retries{AttemptHeader: "grpc-previous-rpc-attempts"}, "retries.attempt_header"},
	} {
		c := s.Config()
		c.Retries = &bad.r
		if err := s.Reconfigure(c); err == nil || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("Reconfigure(%+v): %v, want %q", bad.r, err, bad.want)
		}
	}
	c = s.Config()
	c.Thresholds = shedder.Thresholds{Test: 0.04, Read: 0.5, Write: 0.9}
	if err := s.Reconfigure(c); err == nil || !strings.Contains(err.Error(), "no room below the test threshold") {
		t.Errorf("a test threshold under the margin: %v", err)
	}
	if shedAt(74) || !shedAt(75) {
		t.Fatal("a refused Reconfigure changed the margin")
	}
	c = s.Config()
	c.Retries = nil
	if err := s.Reconfigure(c); err != nil {
		t.Fatal(err)
	}
	if s.RequestHeaders() != nil || shedAt(79) {
		t.Fatal("retries off: a read retry must be shed as a read again")
	}
	if _, err := shedder.New(100, shedder.WithRetries(shedder.Retries{Margin: 0.69}), shedder.WithThresholds(0.6, 0.8, 0.9)); err == nil || !strings.Contains(err.Error(), "WithRetries") {
		t.Errorf("New with a margin above the test threshold: %v", err)
	}
}

// Both transports copy what tells a retry into the Request: over HTTP,
// the attempt header; over gRPC, grpc-previous-rpc-attempts (as a
// retrying grpc-go client sends it). With 76 requests in flight of 100, a
// retried read is refused (503, UNAVAILABLE) and a first attempt is not.
func TestRetriesThroughTransports(t *testing.T) {
	t.Parallel()
	s, err := shedder.New(100, shedder.WithHysteresis(0, 0), shedder.WithRetries(shedder.Retries{AttemptHeader: "x-envoy-attempt-count"}))
	if err != nil {
		t.Fatal(err)
	}
	fg, err := interceptor.New(interceptor.WithPriorityHeader("x-priority"), interceptor.WithRoute(func(*http.Request) string { return "GET /v1/items/{id}" }))
	if err != nil {
		t.Fatal(err)
	}
	dones := hold(t, s, 76)
	defer func() {
		for _, d := range dones {
			d(floodgate.Result{})
		}
	}()

	h := fg.HTTP(s)(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	for _, tc := range []struct {
		attempt string
		code    int
	}{{"", 200}, {"1", 200}, {"2", 503}} {
		req := httptest.NewRequest("GET", "/v1/items/7", nil)
		req.Header.Set("x-priority", "read")
		if tc.attempt != "" {
			req.Header.Set("X-Envoy-Attempt-Count", tc.attempt)
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if rec.Code != tc.code {
			t.Errorf("HTTP, attempt %q: %d, want %d (%s)", tc.attempt, rec.Code, tc.code, rec.Body)
		}
	}

	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	// Every method of an unknown service fails NOT_FOUND, through the
	// stream interceptor (health checks are never limited, so not those).
	srv := grpc.NewServer(grpc.StreamInterceptor(fg.StreamServer(s)), grpc.UnknownServiceHandler(func(any, grpc.ServerStream) error {
		return status.Error(codes.NotFound, "no such item")
	}))
	go srv.Serve(lis) //nolint:errcheck // ends with Stop
	defer srv.Stop()
	// A client that retries NOT_FOUND once: the first attempt fails
	// (admitted: a read at 76 of 100), and
	// the retry carries grpc-previous-rpc-attempts 1. Shed as a retry, it
	// ends UNAVAILABLE; a client that does not retry gets NOT_FOUND.
	const retrying = `{"methodConfig": [{"name": [{"service": "shop.v1.Items"}], "retryPolicy": {
		"maxAttempts": 2, "initialBackoff": "0.001s", "maxBackoff": "0.001s", "backoffMultiplier": 1,
		"retryableStatusCodes": ["NOT_FOUND"]}}]}`
	for _, tc := range []struct {
		config string
		code   codes.Code
	}{{`{}`, codes.NotFound}, {retrying, codes.Unavailable}} {
		conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()), grpc.WithDefaultServiceConfig(tc.config))
		if err != nil {
			t.Fatal(err)
		}
		ctx := metadata.AppendToOutgoingContext(context.Background(), "x-priority", "read")
		err = conn.Invoke(ctx, "/shop.v1.Items/Get", &emptypb.Empty{}, &emptypb.Empty{})
		conn.Close()
		if st := status.Convert(err); st.Code() != tc.code {
			t.Errorf("gRPC, service config %s: %v, want %v", tc.config, err, tc.code)
		}
	}
}
