package connectmw_test

import (
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/floodgate-go/floodgate/connectmw"
	"github.com/floodgate-go/floodgate/interceptor"
	"github.com/floodgate-go/floodgate/internal/testpb"
)

// TestClientRetriesServerStream: in each protocol, a server stream the
// server shed with a 20 ms pushback is reopened with its request and
// request headers, and the caller reads every message; a bidi stream is
// never replayed.
func TestClientRetriesServerStream(t *testing.T) {
	t.Parallel()
	for _, p := range protocols {
		t.Run(p.name, func(t *testing.T) {
			stage := &script{deny: 1, retry: 20 * time.Millisecond}
			guard, err := connectmw.NewHandler(mustInterceptor(interceptor.WithUser(interceptor.FromHeader("x-user"))), stage)
			if err != nil {
				t.Fatal(err)
			}
			srv := serve(t, connect.WithInterceptors(guard))
			retry, err := connectmw.NewClient()
			if err != nil {
				t.Fatal(err)
			}
			opts := append(p.opt, connect.WithInterceptors(retry))
			stream := connect.NewClient[testpb.EchoRequest, testpb.EchoResponse](srv.Client(), srv.URL+streamProc, opts...)
			req := connect.NewRequest(&testpb.EchoRequest{Message: "again"})
			req.Header().Set("x-user", "frank")
			ss, err := stream.CallServerStream(testCtx(t), req)
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for ss.Receive() {
				got = append(got, ss.Msg().GetMessage())
			}
			if ss.Err() != nil || strings.Join(got, ",") != "again,again" {
				t.Fatalf("stream: %q, %v", got, ss.Err())
			}
			_ = ss.Close()
			stage.mu.Lock()
			users := strings.Join(stage.users, ",")
			stage.mu.Unlock()
			if users != "frank,frank" {
				t.Fatalf("admissions by %q, want the retry with the same header", users)
			}

			bidiStage := &script{deny: 1, retry: time.Millisecond}
			guard, _ = connectmw.NewHandler(mustInterceptor(), bidiStage)
			srv = serve(t, connect.WithInterceptors(guard))
			bidi := connect.NewClient[testpb.EchoRequest, testpb.EchoResponse](srv.Client(), srv.URL+bidiProc, opts...)
			bs := bidi.CallBidiStream(testCtx(t))
			_ = bs.Send(&testpb.EchoRequest{Message: "b"})
			_ = bs.CloseRequest()
			if _, err := bs.Receive(); connect.CodeOf(err) != connect.CodeUnavailable {
				t.Fatalf("bidi: %v", err)
			}
			_ = bs.CloseResponse()
			if calls, _ := bidiStage.snapshot(); calls != 1 {
				t.Fatalf("bidi: %d attempts, want 1", calls)
			}
		})
	}
}

// TestClientThrottlesStreams: under WithThrottle a client whose streams
// the server keeps shedding stops opening some of them: those fail with
// the throttle's error and never reach the server.
func TestClientThrottlesStreams(t *testing.T) {
	t.Parallel()
	stage := &script{deny: 1 << 30}
	guard, _ := connectmw.NewHandler(mustInterceptor(), stage)
	srv := serve(t, connect.WithInterceptors(guard))
	thr, err := connectmw.NewClient(interceptor.WithThrottle(interceptor.Throttle{K: 1}), interceptor.WithMaxAttempts(1))
	if err != nil {
		t.Fatal(err)
	}
	stream := connect.NewClient[testpb.EchoRequest, testpb.EchoResponse](srv.Client(), srv.URL+streamProc, connect.WithInterceptors(thr))
	bidi := connect.NewClient[testpb.EchoRequest, testpb.EchoResponse](srv.Client(), srv.URL+bidiProc, connect.WithInterceptors(thr))
	throttled := 0
	const calls = 40
	for i := range calls {
		var err error
		if i%2 == 0 {
			ss, cerr := stream.CallServerStream(testCtx(t), connect.NewRequest(&testpb.EchoRequest{}))
			if err = cerr; cerr == nil {
				ss.Receive()
				err = ss.Err()
				_ = ss.Close()
			}
		} else {
			bs := bidi.CallBidiStream(testCtx(t))
			_ = bs.Send(&testpb.EchoRequest{})
			_ = bs.CloseRequest()
			_, err = bs.Receive()
			_ = bs.CloseResponse()
		}
		if connect.CodeOf(err) != connect.CodeUnavailable {
			t.Fatalf("stream %d: %v", i, err)
		}
		if connectmw.IsClientThrottled(err) {
			throttled++
		}
	}
	sent, _ := stage.snapshot()
	if throttled == 0 || sent+throttled != calls {
		t.Fatalf("%d throttled, %d sent, of %d streams", throttled, sent, calls)
	}
}
