package connectmw_test

import (
	"context"
	"crypto/x509"
	"errors"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/floodgate-go/floodgate/connectmw"
	"github.com/floodgate-go/floodgate/interceptor"
	"github.com/floodgate-go/floodgate/internal/testpb"
	"github.com/floodgate-go/floodgate/testing/clock"
)

// TestClientRetries: in each protocol, NewClient retries a call the
// server shed with a 20 ms pushback once its clock has moved the 20ms
// (a fake clock: interceptor.WithClientClock), not 1ms sooner, and it
// succeeds on the second attempt; a denial the server says no wait cures
// (pushback -1) is returned at once; WithMaxAttempts(1) never retries.
func TestClientRetries(t *testing.T) {
	t.Parallel()
	for _, p := range protocols {
		t.Run(p.name, func(t *testing.T) {
			t.Parallel()
			stage := &script{deny: 1, retry: 20 * time.Millisecond}
			guard, err := connectmw.NewHandler(mustInterceptor(), stage)
			if err != nil {
				t.Fatal(err)
			}
			srv := serve(t, connect.WithInterceptors(guard))
			clk := clock.New(time.Now()) // the calls' deadlines are on the system clock
			retry, err := connectmw.NewClient(interceptor.WithClientClock(clk), interceptor.WithJitter(0))
			if err != nil {
				t.Fatal(err)
			}
			c := unaryClient(srv, plainProc, append(p.opt, connect.WithInterceptors(retry))...)
			ctx := testCtx(t)
			type result struct {
				resp *connect.Response[testpb.EchoResponse]
				err  error
			}
			ended := make(chan result, 1)
			go func() {
				resp, err := c.CallUnary(ctx, connect.NewRequest(&testpb.EchoRequest{Message: "again"}))
				ended <- result{resp, err}
			}()
			waitFor(t, "the retry's wait on the clock", func() bool { return clk.Timers() == 1 })
			clk.Advance(19 * time.Millisecond)
			select {
			case r := <-ended:
				t.Fatalf("the call ended 1ms before the server's 20ms: %v, %v", r.resp, r.err)
			default:
			}
			if calls, _ := stage.snapshot(); calls != 1 || clk.Timers() != 1 {
				t.Fatalf("1ms before the server's 20ms: %d attempts, %d timers; want the wait pending after 1 attempt", calls, clk.Timers())
			}
			clk.Advance(time.Millisecond)
			r := <-ended
			if r.err != nil || r.resp.Msg.GetMessage() != "again" {
				t.Fatalf("retried call: %v, %v", r.resp, r.err)
			}
			if calls, _ := stage.snapshot(); calls != 2 {
				t.Fatalf("%d attempts, want 2", calls)
			}

			// RetryAfter 0: pushback -1, "do not retry".
			never := &script{deny: 5}
			guard, _ = connectmw.NewHandler(mustInterceptor(), never)
			srv = serve(t, connect.WithInterceptors(guard))
			c = unaryClient(srv, plainProc, append(p.opt, connect.WithInterceptors(retry))...)
			_, err = c.CallUnary(testCtx(t), connect.NewRequest(&testpb.EchoRequest{}))
			if connect.CodeOf(err) != connect.CodeUnavailable {
				t.Fatalf("shed call: %v", err)
			}
			if calls, _ := never.snapshot(); calls != 1 {
				t.Fatalf("pushback -1: %d attempts, want 1", calls)
			}
			if d, ok := connectmw.RetryDelay(err); ok {
				t.Errorf("RetryDelay of a do-not-retry denial = %v, true", d)
			}

			once, err := connectmw.NewClient(interceptor.WithMaxAttempts(1))
			if err != nil {
				t.Fatal(err)
			}
			stage = &script{deny: 1, retry: time.Millisecond}
			guard, _ = connectmw.NewHandler(mustInterceptor(), stage)
			srv = serve(t, connect.WithInterceptors(guard))
			c = unaryClient(srv, plainProc, append(p.opt, connect.WithInterceptors(once))...)
			if _, err := c.CallUnary(testCtx(t), connect.NewRequest(&testpb.EchoRequest{})); connect.CodeOf(err) != connect.CodeUnavailable {
				t.Fatalf("WithMaxAttempts(1): %v", err)
			}
			if calls, _ := stage.snapshot(); calls != 1 {
				t.Fatalf("WithMaxAttempts(1): %d attempts", calls)
			}
		})
	}
}

// TestClientDeadline: a pushback that ends after the call's deadline is
// not waited for: the client, on a fake clock that reads the system
// clock's time when the test starts (the deadline's clock), never starts a
// wait on it.
func TestClientDeadline(t *testing.T) {
	t.Parallel()
	stage := &script{deny: 1, retry: 5 * time.Second}
	guard, _ := connectmw.NewHandler(mustInterceptor(), stage)
	srv := serve(t, connect.WithInterceptors(guard))
	clk := clock.New(time.Now())
	retry, _ := connectmw.NewClient(interceptor.WithClientClock(clk))
	c := unaryClient(srv, plainProc, connect.WithInterceptors(retry))
	ctx, cancel := context.WithDeadline(context.Background(), clk.Now().Add(2*time.Second))
	defer cancel()
	_, err := c.CallUnary(ctx, connect.NewRequest(&testpb.EchoRequest{}))
	if connect.CodeOf(err) != connect.CodeUnavailable {
		t.Fatalf("call: %v", err)
	}
	if d, ok := connectmw.RetryDelay(err); !ok || d != 5*time.Second {
		t.Errorf("RetryDelay = %v, %v; want 5s", d, ok)
	}
	if n := clk.Timers(); n != 0 {
		t.Errorf("the client started %d waits: it waited for a retry past its deadline", n)
	}
	if calls, _ := stage.snapshot(); calls != 1 {
		t.Errorf("%d attempts, want 1", calls)
	}
}

// TestClientThrottle: with WithThrottle, a client whose calls the server
// keeps shedding stops sending some of them; those fail with the
// throttle's UNAVAILABLE (IsClientThrottled) and never reach the server.
func TestClientThrottle(t *testing.T) {
	t.Parallel()
	stage := &script{deny: 1 << 30}
	guard, _ := connectmw.NewHandler(mustInterceptor(), stage)
	srv := serve(t, connect.WithInterceptors(guard))
	thr, err := connectmw.NewClient(interceptor.WithThrottle(interceptor.Throttle{K: 1}))
	if err != nil {
		t.Fatal(err)
	}
	c := unaryClient(srv, plainProc, connect.WithInterceptors(thr))
	throttled := 0
	const calls = 40
	for range calls {
		_, err := c.CallUnary(testCtx(t), connect.NewRequest(&testpb.EchoRequest{}))
		if connect.CodeOf(err) != connect.CodeUnavailable {
			t.Fatalf("call: %v", err)
		}
		if connectmw.IsClientThrottled(err) {
			throttled++
		}
	}
	sent, _ := stage.snapshot()
	if throttled == 0 || sent+throttled != calls {
		t.Fatalf("%d throttled, %d sent, of %d calls", throttled, sent, calls)
	}
	if connectmw.IsClientThrottled(connect.NewError(connect.CodeUnavailable, errors.New("x"))) {
		t.Error("a server's UNAVAILABLE is not the throttle's")
	}
}

// TestGRPCClientReadsDenial: a grpc-go client calling the Connect handler
// over the gRPC protocol gets the status details and the pushback trailer
// grpc-go's retry policy and interceptor.UnaryClient honour; UnaryClient
// retries after it.
func TestGRPCClientReadsDenial(t *testing.T) {
	t.Parallel()
	stage := &script{deny: 1, retry: 20 * time.Millisecond}
	guard, _ := connectmw.NewHandler(mustInterceptor(interceptor.WithDomain("echo.example")), stage)
	srv := serve(t, connect.WithInterceptors(guard))
	pool := x509.NewCertPool()
	pool.AddCert(srv.Certificate())
	dial := func(opts ...grpc.DialOption) testpb.EchoClient {
		cc, err := grpc.NewClient(srv.Listener.Addr().String(), append(opts, grpc.WithTransportCredentials(credentials.NewClientTLSFromCert(pool, "")))...)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cc.Close() })
		return testpb.NewEchoClient(cc)
	}
	var trailer metadata.MD
	_, err := dial().Plain(testCtx(t), &testpb.EchoRequest{}, grpc.Trailer(&trailer))
	st := status.Convert(err)
	if st.Code() != codes.Unavailable || st.Message() != "server overloaded: request shed; retry after 20ms" {
		t.Fatalf("status = %v", st)
	}
	if got := trailer.Get(interceptor.PushbackTrailer); len(got) != 1 || got[0] != "20" {
		t.Fatalf("pushback trailer = %q, want 20", got)
	}
	var reasons []string
	for _, d := range st.Details() {
		if ei, ok := d.(*errdetails.ErrorInfo); ok {
			reasons = append(reasons, ei.GetReason()+"@"+ei.GetDomain())
		}
		if ri, ok := d.(*errdetails.RetryInfo); ok && ri.GetRetryDelay().AsDuration() != 20*time.Millisecond {
			t.Errorf("RetryInfo = %v", ri)
		}
	}
	if len(reasons) != 1 || reasons[0] != "LOAD_SHED@echo.example" || len(st.Details()) != 2 {
		t.Errorf("details = %v", st.Details())
	}

	stage.mu.Lock()
	stage.deny = 2 // the next call is denied once more, then retried
	stage.mu.Unlock()
	resp, err := dial(grpc.WithUnaryInterceptor(interceptor.UnaryClient())).Plain(testCtx(t), &testpb.EchoRequest{Message: "grpc"})
	if err != nil || resp.GetMessage() != "grpc" {
		t.Fatalf("UnaryClient: %v, %v", resp, err)
	}
	if calls, _ := stage.snapshot(); calls != 3 {
		t.Errorf("%d admissions, want 3", calls)
	}
}
