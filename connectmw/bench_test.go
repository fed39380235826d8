package connectmw_test

import (
	"context"
	"testing"

	"connectrpc.com/connect"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/connectmw"
	"github.com/floodgate-go/floodgate/internal/testpb"
)

// BenchmarkHandlerUnary runs a unary handler through NewHandler's
// interceptor directly, without a transport, so the figure is the
// interceptor's own cost: "none" is the bare handler, "allow" an allowing
// stage that holds nothing, "deny" a shedder denial (the *connect.Error
// with its details and metadata).
func BenchmarkHandlerUnary(b *testing.B) {
	allow := floodgate.AdmitFunc(func(context.Context, *floodgate.Request) (floodgate.Decision, floodgate.Done, error) {
		return floodgate.Decision{Allowed: true, Stage: floodgate.StageShedder}, nil, nil
	})
	deny := floodgate.AdmitFunc(func(context.Context, *floodgate.Request) (floodgate.Decision, floodgate.Done, error) {
		return floodgate.Decision{Stage: floodgate.StageShedder, RetryAfter: 1}, nil, nil
	})
	handler := connect.UnaryFunc(func(_ context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
		return connect.NewResponse(&testpb.EchoResponse{}), nil
	})
	wrap := func(a floodgate.Admitter) connect.UnaryFunc {
		guard, err := connectmw.NewHandler(mustInterceptor(), a)
		if err != nil {
			b.Fatal(err)
		}
		return guard.WrapUnary(handler)
	}
	req := connect.NewRequest(&testpb.EchoRequest{Message: "m"})
	for _, tc := range []struct {
		name    string
		f       connect.UnaryFunc
		wantErr bool
	}{{"none", handler, false}, {"allow", wrap(allow), false}, {"deny", wrap(deny), true}} {
		b.Run(tc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := tc.f(context.Background(), req); (err != nil) != tc.wantErr {
					b.Fatal(err)
				}
			}
		})
	}
}
