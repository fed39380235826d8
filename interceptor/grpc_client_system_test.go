//go:build system

package interceptor

import (
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/internal/testpb"
)

// The client's retries on real time: the system tier (CONTRIBUTING.md,
// "Two tiers of tests"); the fast tier's client tests sleep through
// WithSleep.

// TestClientRealSleep: the client's own sleep (no WithSleep) waits the
// server's pushback before it retries: the retry comes no sooner than
// 30ms after the call. The bound is a lower one, which a loaded machine
// cannot break (it only makes the wait longer); the call's 10s deadline
// bounds the wait from above, hundreds of times the 30ms it takes.
func TestClientRealSleep(t *testing.T) {
	s := denyFirst(1, floodgate.Decision{Stage: floodgate.StageTiers, RetryAfter: 30 * time.Millisecond})
	c := clientConn(t, s, WithJitter(0))
	start := time.Now()
	if _, err := c.Plain(testCtx(t), &testpb.EchoRequest{}); err != nil {
		t.Fatal(err)
	}
	if el := time.Since(start); el < 30*time.Millisecond {
		t.Errorf("retried after %v, before the 30ms pushback", el)
	}
	if s.admits.Load() != 2 {
		t.Errorf("server admits = %d, want 2 (the denied call and its retry)", s.admits.Load())
	}
}

// grpc-go's own retry (gRFC A6) reads only grpc-retry-pushback-ms: a
// positive pushback is waited (200 ms, where the configured backoff alone
// would retry within 1 ms) and retried; -1 stops retries even though the
// code is listed as retryable. Over loopback TCP, on grpc-go's own timers:
// the bound is a lower one (the retry no sooner than 200ms after the
// call), which a loaded machine cannot break; the calls' 10s deadline
// bounds them from above, 50 times the pushback.
func TestGRPCBuiltinRetryHonoursPushback(t *testing.T) {
	const sc = `{"methodConfig":[{"name":[{"service":"floodgate.test.v1.Echo"}],"retryPolicy":{
		"maxAttempts":3,"initialBackoff":"0.001s","maxBackoff":"0.001s","backoffMultiplier":1.0,
		"retryableStatusCodes":["RESOURCE_EXHAUSTED","UNAVAILABLE"]}}]}`
	for _, tc := range []struct {
		name     string
		d        floodgate.Decision
		wantErr  codes.Code
		attempts int64
	}{
		{"pushback 200ms retried", floodgate.Decision{Stage: floodgate.StageShedder, RetryAfter: 200 * time.Millisecond}, codes.OK, 2},
		{"pushback -1 not retried", floodgate.Decision{Stage: floodgate.StageTiers}, codes.ResourceExhausted, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := denyFirst(1, tc.d)
			c := testpb.NewEchoClient(startLoopback(t, &echoServer{},
				[]grpc.ServerOption{grpc.ChainUnaryInterceptor(mustUnary(s))},
				grpc.WithDefaultServiceConfig(sc)))
			start := time.Now()
			_, err := c.Plain(testCtx(t), &testpb.EchoRequest{})
			if status.Code(err) != tc.wantErr {
				t.Fatalf("err = %v, want %v", err, tc.wantErr)
			}
			if s.admits.Load() != tc.attempts {
				t.Errorf("attempts = %d, want %d", s.admits.Load(), tc.attempts)
			}
			if el := time.Since(start); tc.wantErr == codes.OK && el < 200*time.Millisecond {
				t.Errorf("retried after %v: before the 200ms pushback (the 1ms backoff was used)", el)
			}
		})
	}
}
