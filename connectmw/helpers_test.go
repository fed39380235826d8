package connectmw_test

import (
	"context"
	"errors"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/internal/testpb"
	"github.com/floodgate-go/floodgate/testing/clock"
	"github.com/floodgate-go/floodgate/tiers"
	"github.com/floodgate-go/floodgate/tiers/memstore"
)

// The procedures of the test service (internal/testpb's Echo), served by
// connect's generic handlers: no generated Connect code is needed.
const (
	plainProc     = "/floodgate.test.v1.Echo/Plain"
	expensiveProc = "/floodgate.test.v1.Echo/Expensive" // annotated: cost 10, critical
	streamProc    = "/floodgate.test.v1.Echo/ServerStream"
	bidiProc      = "/floodgate.test.v1.Echo/Bidi"
)

// echo is the Echo service. A Plain call whose message names an error
// code returns it; one of "soft?" answers the soft limits its Request
// went over (floodgate.Request.SoftExceeded).
func echoPlain(ctx context.Context, req *connect.Request[testpb.EchoRequest]) (*connect.Response[testpb.EchoResponse], error) {
	switch req.Msg.GetMessage() {
	case "soft?":
		r, _ := floodgate.FromContext(ctx)
		return connect.NewResponse(&testpb.EchoResponse{Message: r.SoftExceeded}), nil
	case "unavailable":
		return nil, connect.NewError(connect.CodeUnavailable, errors.New("busy"))
	case "invalid":
		return nil, connect.NewError(connect.CodeInvalidArgument, errors.New("bad"))
	case "panic":
		panic("echo exploded")
	}
	return connect.NewResponse(&testpb.EchoResponse{Message: req.Msg.GetMessage()}), nil
}

func echoStream(_ context.Context, req *connect.Request[testpb.EchoRequest], s *connect.ServerStream[testpb.EchoResponse]) error {
	for range 2 {
		if err := s.Send(&testpb.EchoResponse{Message: req.Msg.GetMessage()}); err != nil {
			return err
		}
	}
	return nil
}

func echoBidi(_ context.Context, s *connect.BidiStream[testpb.EchoRequest, testpb.EchoResponse]) error {
	for {
		m, err := s.Receive()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		if err := s.Send(&testpb.EchoResponse{Message: m.GetMessage()}); err != nil {
			return err
		}
	}
}

// serve starts the Echo service over HTTP/2 with TLS on a loopback port
// (httptest), every handler with opts (its interceptors).
func serve(t *testing.T, opts ...connect.HandlerOption) *httptest.Server {
	t.Helper()
	mux := http.NewServeMux()
	mux.Handle(plainProc, connect.NewUnaryHandler(plainProc, echoPlain, opts...))
	mux.Handle(expensiveProc, connect.NewUnaryHandler(expensiveProc, echoPlain, opts...))
	mux.Handle(streamProc, connect.NewServerStreamHandler(streamProc, echoStream, opts...))
	mux.Handle(bidiProc, connect.NewBidiStreamHandler(bidiProc, echoBidi, opts...))
	srv := httptest.NewUnstartedServer(mux)
	srv.EnableHTTP2 = true
	srv.Config.ErrorLog = log.New(io.Discard, "", 0) // a handler's panic (TestDoneOutcomes) is no news
	srv.StartTLS()
	t.Cleanup(srv.Close)
	return srv
}

// protocols are Connect's three protocols, as client options.
var protocols = []struct {
	name string
	opt  []connect.ClientOption
}{
	{"connect", nil},
	{"grpc", []connect.ClientOption{connect.WithGRPC()}},
	{"grpcweb", []connect.ClientOption{connect.WithGRPCWeb()}},
}

func unaryClient(srv *httptest.Server, proc string, opts ...connect.ClientOption) *connect.Client[testpb.EchoRequest, testpb.EchoResponse] {
	return connect.NewClient[testpb.EchoRequest, testpb.EchoResponse](srv.Client(), srv.URL+proc, opts...)
}

// perUser is a real tiers.Limiter over the memstore on a fake clock: 2
// calls a minute per user (a token bucket: once both are spent, the next
// token comes 30 s later).
func perUser(t *testing.T) *tiers.Limiter {
	t.Helper()
	policy, err := tiers.Load([]byte("rules:\n  - {name: per-user, key: [user], rate: 2/1m}\n"))
	if err != nil {
		t.Fatal(err)
	}
	store, err := memstore.New(memstore.WithClock(clock.New(time.Time{})))
	if err != nil {
		t.Fatal(err)
	}
	lim, err := tiers.NewLimiter(store, policy)
	if err != nil {
		t.Fatal(err)
	}
	return lim
}

// waitFor polls cond for up to 10s: the bounded wait for an event of
// another goroutine (a handler's Done, a client's wait), which fails the
// test naming what did not happen.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !cond(); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// script is a stage that denies its first deny admissions (and those from
// from on) as the shedder would, with retry, and admits the others,
// recording every admission's user and result.
type script struct {
	mu      sync.Mutex
	deny    int
	from    int // when > 0, also deny every admission from this one on
	retry   time.Duration
	waited  time.Duration // Decision.Waited of an admission (max_wait)
	soft    string        // Decision.SoftExceeded of an admission
	calls   int
	users   []string // the Identity.User of every admission
	results []floodgate.Result
}

func (s *script) Admit(_ context.Context, r *floodgate.Request) (floodgate.Decision, floodgate.Done, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.calls++
	s.users = append(s.users, r.Identity.User)
	if s.calls <= s.deny || (s.from > 0 && s.calls >= s.from) {
		return floodgate.Decision{Stage: floodgate.StageShedder, Source: floodgate.SourceShedder, RetryAfter: s.retry}, nil, nil
	}
	return floodgate.Decision{Allowed: true, Stage: floodgate.StageConcurrency, Source: floodgate.SourceConcurrency, Waited: s.waited, SoftExceeded: s.soft}, func(r floodgate.Result) {
		s.mu.Lock()
		defer s.mu.Unlock()
		s.results = append(s.results, r)
	}, nil
}

func (s *script) snapshot() (calls int, results []floodgate.Result) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.calls, append([]floodgate.Result(nil), s.results...)
}
