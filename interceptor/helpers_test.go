package interceptor

import (
	"context"
	"io"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/test/bufconn"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/internal/testpb"
)

// stage is a test Admitter: it answers with decide (or allows), records
// every Request it saw, and counts Admit and Done calls and what is held.
type stage struct {
	decide func(r *floodgate.Request) (floodgate.Decision, error)

	mu    sync.Mutex
	seen  []*floodgate.Request
	costs []int64
	prios []floodgate.Priority
	// results are the Results its Dones were called with, in order.
	results []floodgate.Result

	admits atomic.Int64
	dones  atomic.Int64
	held   atomic.Int64
}

func (s *stage) Admit(_ context.Context, r *floodgate.Request) (floodgate.Decision, floodgate.Done, error) {
	s.admits.Add(1)
	s.mu.Lock()
	s.seen = append(s.seen, r)
	s.costs = append(s.costs, r.Cost)
	s.prios = append(s.prios, r.Priority)
	s.mu.Unlock()
	d := floodgate.Decision{Allowed: true, Stage: floodgate.StageTiers}
	var err error
	if s.decide != nil {
		d, err = s.decide(r)
	}
	if !d.Allowed {
		return d, nil, err
	}
	s.held.Add(1)
	var once atomic.Bool
	return d, func(res floodgate.Result) {
		if !once.CompareAndSwap(false, true) {
			panic("Done called twice")
		}
		s.mu.Lock()
		s.results = append(s.results, res)
		s.mu.Unlock()
		s.held.Add(-1)
		s.dones.Add(1)
	}, err
}

// finished returns the Results the stage's Dones were called with.
func (s *stage) finished() []floodgate.Result {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]floodgate.Result(nil), s.results...)
}

func (s *stage) requests() []*floodgate.Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]*floodgate.Request(nil), s.seen...)
}

// echoServer implements testpb.EchoServer.
type echoServer struct {
	testpb.UnimplementedEchoServer
	// streamStarted is signalled when a Bidi or ServerStream handler runs.
	streamStarted chan struct{}
	// block makes ServerStream wait for the client to cancel.
	block   bool
	panicOn string
}

func (e *echoServer) Expensive(_ context.Context, in *testpb.EchoRequest) (*testpb.EchoResponse, error) {
	return &testpb.EchoResponse{Message: in.GetMessage()}, nil
}

func (e *echoServer) Plain(_ context.Context, in *testpb.EchoRequest) (*testpb.EchoResponse, error) {
	if e.panicOn != "" && in.GetMessage() == e.panicOn {
		panic("handler panic")
	}
	return &testpb.EchoResponse{Message: in.GetMessage()}, nil
}

func (e *echoServer) ServerStream(in *testpb.EchoRequest, ss grpc.ServerStreamingServer[testpb.EchoResponse]) error {
	if e.streamStarted != nil {
		e.streamStarted <- struct{}{}
	}
	if e.block {
		<-ss.Context().Done()
		return ss.Context().Err()
	}
	for range 3 {
		if err := ss.Send(&testpb.EchoResponse{Message: in.GetMessage()}); err != nil {
			return err
		}
	}
	return nil
}

func (e *echoServer) Bidi(ss grpc.BidiStreamingServer[testpb.EchoRequest, testpb.EchoResponse]) error {
	if e.streamStarted != nil {
		e.streamStarted <- struct{}{}
	}
	for {
		in, err := ss.Recv()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
		if err := ss.Send(&testpb.EchoResponse{Message: in.GetMessage()}); err != nil {
			return err
		}
	}
}

// startBufconn serves e over bufconn with the server options and returns a
// client connection (with the dial options).
func startBufconn(t testing.TB, e testpb.EchoServer, sopts []grpc.ServerOption, dopts ...grpc.DialOption) *grpc.ClientConn {
	t.Helper()
	lis := bufconn.Listen(1 << 20)
	srv := grpc.NewServer(sopts...)
	testpb.RegisterEchoServer(srv, e)
	registerExtra(srv)
	go func() { _ = srv.Serve(lis) }()
	dopts = append([]grpc.DialOption{
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) }),
		grpc.WithTransportCredentials(insecure.NewCredentials()),
	}, dopts...)
	cc, err := grpc.NewClient("passthrough:///bufnet", dopts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cc.Close()
		srv.Stop()
	})
	return cc
}

// startLoopback serves e on 127.0.0.1 and returns a client connection.
func startLoopback(t testing.TB, e testpb.EchoServer, sopts []grpc.ServerOption, dopts ...grpc.DialOption) *grpc.ClientConn {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer(sopts...)
	testpb.RegisterEchoServer(srv, e)
	registerExtra(srv)
	go func() { _ = srv.Serve(lis) }()
	dopts = append([]grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}, dopts...)
	cc, err := grpc.NewClient(lis.Addr().String(), dopts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cc.Close()
		srv.Stop()
	})
	return cc
}

// waitFor polls cond for up to 5 s; the bounded wait for asynchronous
// server-side effects (a stream handler returning after a client cancel).
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// mustUnary is MustNew(opts...).UnaryServer(a): one stage, or one Chain,
// behind an Interceptor of its own.
func mustUnary(a floodgate.Admitter, opts ...Option) grpc.UnaryServerInterceptor {
	return MustNew(opts...).UnaryServer(a)
}

// mustStream is MustNew(opts...).StreamServer(a).
func mustStream(a floodgate.Admitter, opts ...Option) grpc.StreamServerInterceptor {
	return MustNew(opts...).StreamServer(a)
}

// mustHTTP is MustNew(opts...).HTTP(a).
func mustHTTP(a floodgate.Admitter, opts ...Option) func(http.Handler) http.Handler {
	return MustNew(opts...).HTTP(a)
}
