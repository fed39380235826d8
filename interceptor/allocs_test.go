package interceptor

import (
	"context"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
)

// TestUnaryAllocations pins what an admitted unary call allocates in the
// interceptors, one per stage (shedder, concurrency, 4-level tiers on the
// memstore): the Request and its context, once per call, and nothing per
// stage (classifying the handler's outcome allocated once per stage when
// it used errors.As).
func TestUnaryAllocations(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector adds allocations")
	}
	stages, opts := fullChain(t)
	fg := MustNew(opts...)
	ics := []grpc.UnaryServerInterceptor{fg.UnaryServer(stages[0]), fg.UnaryServer(stages[1]), fg.UnaryServer(stages[2])}
	info := &grpc.UnaryServerInfo{FullMethod: "/floodgate.test.v1.Echo/Plain"}
	h := grpc.UnaryHandler(func(ctx context.Context, req any) (any, error) { return req, nil })
	for k := len(ics) - 1; k >= 0; k-- {
		ic, next := ics[k], h
		h = func(ctx context.Context, req any) (any, error) { return ic(ctx, req, info, next) }
	}
	ctx := metadata.NewIncomingContext(context.Background(), metadata.Pairs("x-other", "1"))
	var err error
	if n := testing.AllocsPerRun(1000, func() { _, err = h(ctx, info) }); n != 1 {
		t.Errorf("an admitted call through three interceptors allocates %v times, want 1 (its Request)", n)
	}
	if err != nil {
		t.Fatal(err)
	}
}
