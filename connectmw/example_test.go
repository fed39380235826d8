package connectmw_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/genproto/googleapis/rpc/errdetails"

	"github.com/floodgate-go/floodgate/connectmw"
	"github.com/floodgate-go/floodgate/interceptor"
	"github.com/floodgate-go/floodgate/internal/testpb"
	"github.com/floodgate-go/floodgate/testing/clock"
	"github.com/floodgate-go/floodgate/tiers"
	"github.com/floodgate-go/floodgate/tiers/memstore"
)

// A Connect handler guarded by a rate limit of one call a minute per
// user (on a fake clock, so the delays print exactly): the second call is
// denied, and the Connect client reads the details back.
func Example() {
	policy, err := tiers.Load([]byte("rules:\n  - {name: per-user, key: [user], rate: 1/1m}\n"))
	if err != nil {
		panic(err)
	}
	store, err := memstore.New(memstore.WithClock(clock.New(time.Time{})))
	if err != nil {
		panic(err)
	}
	limits, err := tiers.NewLimiter(store, policy)
	if err != nil {
		panic(err)
	}
	fg, err := interceptor.New(interceptor.WithUser(interceptor.FromHeader("x-user")))
	if err != nil {
		panic(err)
	}
	guard, err := connectmw.NewHandler(fg, limits)
	if err != nil {
		panic(err)
	}
	const proc = "/floodgate.test.v1.Echo/Plain"
	mux := http.NewServeMux()
	mux.Handle(proc, connect.NewUnaryHandler(proc, func(_ context.Context, req *connect.Request[testpb.EchoRequest]) (*connect.Response[testpb.EchoResponse], error) {
		return connect.NewResponse(&testpb.EchoResponse{Message: req.Msg.GetMessage()}), nil
	}, connect.WithInterceptors(guard)))
	srv := httptest.NewServer(mux)
	defer srv.Close()

	client := connect.NewClient[testpb.EchoRequest, testpb.EchoResponse](srv.Client(), srv.URL+proc)
	for i := range 2 {
		req := connect.NewRequest(&testpb.EchoRequest{Message: "hello"})
		req.Header().Set("x-user", "alice")
		resp, err := client.CallUnary(context.Background(), req)
		if err == nil {
			fmt.Printf("call %d: %s\n", i+1, resp.Msg.GetMessage())
			continue
		}
		var ce *connect.Error
		if !errors.As(err, &ce) {
			panic(err)
		}
		fmt.Printf("call %d: %v\n", i+1, ce)
		for _, d := range ce.Details() {
			switch v, _ := d.Value(); v := v.(type) {
			case *errdetails.ErrorInfo:
				fmt.Println("ErrorInfo", v.GetReason())
			case *errdetails.RetryInfo:
				fmt.Println("RetryInfo", v.GetRetryDelay().AsDuration())
			case *errdetails.QuotaFailure:
				fmt.Println("QuotaFailure", v.GetViolations()[0].GetDescription())
			}
		}
		fmt.Println("pushback", ce.Meta().Get(interceptor.PushbackTrailer), "ms")
	}
	// Output:
	// call 1: hello
	// call 2: resource_exhausted: rate limit exceeded (policy "per-user"); retry after 1m0s
	// ErrorInfo RATE_LIMIT_EXCEEDED
	// RetryInfo 1m0s
	// QuotaFailure rate limit of 1 per 1m0s exceeded
	// pushback 60000 ms
}
