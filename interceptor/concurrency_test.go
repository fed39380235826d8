package interceptor

import (
	"context"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/floodgate-go/floodgate/concurrency"
	"github.com/floodgate-go/floodgate/internal/testpb"
)

// With the real concurrency limiter capped at one stream in flight: an
// open stream holds the slot (a second is denied), and the slot comes back
// when the stream ends and when the client cancels it.
func TestStreamHoldsRealConcurrencySlot(t *testing.T) {
	t.Parallel()
	lim, err := concurrency.New(concurrency.WithGlobal(1))
	if err != nil {
		t.Fatal(err)
	}
	e := &echoServer{streamStarted: make(chan struct{}, 4)}
	c := testpb.NewEchoClient(startLoopback(t, e, []grpc.ServerOption{
		grpc.ChainStreamInterceptor(mustStream(lim)),
		grpc.ChainUnaryInterceptor(mustUnary(lim)),
	}))

	openBidi := func(ctx context.Context) (grpc.BidiStreamingClient[testpb.EchoRequest, testpb.EchoResponse], error) {
		bs, err := c.Bidi(ctx)
		if err != nil {
			return nil, err
		}
		if err := bs.Send(&testpb.EchoRequest{Message: "m"}); err != nil {
			_, rerr := bs.Recv()
			return nil, rerr
		}
		if _, err := bs.Recv(); err != nil {
			return nil, err
		}
		return bs, nil
	}

	// 1. Client cancels a held stream.
	ctx, cancel := context.WithCancel(testCtx(t))
	if _, err := openBidi(ctx); err != nil {
		t.Fatal(err)
	}
	<-e.streamStarted
	if _, err := c.Plain(testCtx(t), &testpb.EchoRequest{}); status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("while a stream holds the only slot: %v, want ResourceExhausted", err)
	}
	cancel()
	waitFor(t, "slot back after cancel", func() bool {
		_, err := c.Plain(testCtx(t), &testpb.EchoRequest{})
		return err == nil
	})

	// 2. A stream that ends normally.
	bs, err := openBidi(testCtx(t))
	if err != nil {
		t.Fatal(err)
	}
	<-e.streamStarted
	if _, err := openBidi(testCtx(t)); status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("second stream: %v, want ResourceExhausted", err)
	}
	if err := bs.CloseSend(); err != nil {
		t.Fatal(err)
	}
	if _, err := bs.Recv(); err == nil {
		t.Fatal("want EOF")
	}
	waitFor(t, "slot back after stream end", func() bool {
		_, err := c.Plain(testCtx(t), &testpb.EchoRequest{})
		return err == nil
	})
}
