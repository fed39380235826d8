package interceptor_test

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/test/bufconn"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/interceptor"
	"github.com/floodgate-go/floodgate/internal/testpb"
)

// onePerMinute is a toy stage standing in for a tiers.Limiter: the first
// request passes, later ones are denied for 20 s.
func onePerMinute() floodgate.Admitter {
	used := false
	return floodgate.AdmitFunc(func(context.Context, *floodgate.Request) (floodgate.Decision, floodgate.Done, error) {
		d := floodgate.Decision{Stage: floodgate.StageTiers, Policy: "per-ip", Limit: 1, Window: time.Minute}
		if !used {
			used = true
			d.Allowed, d.Reset = true, time.Minute
			return d, nil, nil
		}
		d.RetryAfter, d.Reset = 20*time.Second, 20*time.Second
		return d, nil, nil
	})
}

type echo struct{ testpb.UnimplementedEchoServer }

func (echo) Plain(_ context.Context, in *testpb.EchoRequest) (*testpb.EchoResponse, error) {
	return &testpb.EchoResponse{Message: in.GetMessage()}, nil
}

// A gRPC server with one interceptor per stage (here one stage), and a
// client that reads the denial.
func ExampleInterceptor_UnaryServer() {
	lis := bufconn.Listen(1 << 16)
	fg, err := interceptor.New(interceptor.WithDomain("echo.example.com"))
	if err != nil {
		fmt.Println(err)
		return
	}
	srv := grpc.NewServer(grpc.ChainUnaryInterceptor(
		fg.UnaryServer(onePerMinute()),
	))
	testpb.RegisterEchoServer(srv, echo{})
	go func() { _ = srv.Serve(lis) }()
	defer srv.Stop()

	cc, err := grpc.NewClient("passthrough:///bufnet",
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) }),
		grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer cc.Close()
	c := testpb.NewEchoClient(cc)
	for range 2 {
		var trailer metadata.MD
		_, err := c.Plain(context.Background(), &testpb.EchoRequest{Message: "hi"}, grpc.Trailer(&trailer))
		st := status.Convert(err)
		fmt.Println(st.Code(), st.Message(), trailer.Get(interceptor.PushbackTrailer))
	}
	// Output:
	// OK  []
	// ResourceExhausted rate limit exceeded (policy "per-ip"); retry after 20s [20000]
}

// HTTP middleware wrapping a handler inside the mux, so the route pattern
// names the request.
func ExampleInterceptor_HTTP() {
	mux := http.NewServeMux()
	fg, err := interceptor.New(interceptor.WithHealthPaths("/healthz"))
	if err != nil {
		fmt.Println(err)
		return
	}
	limit := fg.HTTP(onePerMinute())
	mux.Handle("GET /v1/items/{id}", limit(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintln(w, "item", r.PathValue("id"))
	})))
	for range 2 {
		rec := httptest.NewRecorder()
		mux.ServeHTTP(rec, httptest.NewRequest("GET", "/v1/items/7", nil))
		fmt.Printf("%d %s %s retry-after=%q\n", rec.Code, rec.Header().Get("RateLimit-Policy"), rec.Header().Get("RateLimit"), rec.Header().Get("Retry-After"))
		fmt.Print(rec.Body.String())
	}
	// Output:
	// 200 "per-ip";q=1;w=60 "per-ip";r=0;t=60 retry-after=""
	// item 7
	// 429 "per-ip";q=1;w=60 "per-ip";r=0;t=20 retry-after="20"
	// {"type":"https://iana.org/assignments/http-problem-types#quota-exceeded","title":"Request cannot be satisfied as assigned quota has been exceeded","status":429,"detail":"rate limit exceeded; retry after 20 seconds","violated-policies":["per-ip"]}
}

// A client that waits out the server's pushback, at most 3 attempts,
// never past its deadline.
func ExampleUnaryClient() {
	dial := []grpc.DialOption{
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithChainUnaryInterceptor(interceptor.UnaryClient(interceptor.WithMaxAttempts(3), interceptor.WithJitter(0.2))),
		grpc.WithChainStreamInterceptor(interceptor.StreamClient(interceptor.WithMaxAttempts(3))),
	}
	cc, err := grpc.NewClient("127.0.0.1:50051", dial...)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer cc.Close()
	fmt.Println("client ready")
	// Output: client ready
}

// The status a denial becomes on the wire.
func ExampleDenyStatus() {
	st := interceptor.DenyStatus(floodgate.Decision{
		Stage: floodgate.StageShedder, Policy: "shedder", RetryAfter: 500 * time.Millisecond,
	}, "echo.example.com")
	fmt.Println(st.Code(), st.Message())
	for _, d := range st.Details() {
		fmt.Printf("%T\n", d)
	}
	// Output:
	// Unavailable server overloaded: request shed (policy "shedder"); retry after 500ms
	// *errdetails.ErrorInfo
	// *errdetails.RetryInfo
}
