package interceptor

import (
	"context"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	"github.com/floodgate-go/floodgate"
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

// TestRuleDetailsAllocations: once a rule's details are cached, finding
// them allocates nothing, for a deny with one violated window and for one
// with several (whose list is the cache's key).
func TestRuleDetailsAllocations(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector adds allocations")
	}
	one := floodgate.Decision{Stage: floodgate.StageTiers, Policy: "alloc-user", Limit: 10, Window: time.Second}
	multi := one
	multi.SetQuotas([]floodgate.Quota{
		{Policy: "alloc-user", Limit: 10, Window: time.Second, Violated: true},
		{Policy: "alloc-day", Limit: 1000, Window: 24 * time.Hour},
		{Policy: "alloc-key", Limit: 20, Window: time.Second, Violated: true},
	})
	sem := one.Stage.Semantics()
	for _, d := range []floodgate.Decision{one, multi} {
		f := ruleDetails(d, &sem, "alloc.example", true)
		if f == nil {
			t.Fatal("no details")
		}
		if n := testing.AllocsPerRun(100, func() {
			if ruleDetails(d, &sem, "alloc.example", true) != f {
				t.Fatal("the cached details changed")
			}
		}); n != 0 {
			t.Errorf("finding the cached details of a deny with %d quotas allocates %v times, want 0", len(d.Quotas()), n)
		}
	}
}
