package interceptor_test

import (
	"fmt"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/floodgate-go/floodgate/interceptor"
)

// Client-side adaptive throttling: while the backend rejects most calls
// (RESOURCE_EXHAUSTED, UNAVAILABLE), this client stops sending a share of
// them itself, so a shedding server is not hammered; the rejected calls
// fail at once with UNAVAILABLE, and interceptor.IsClientThrottled tells
// them apart. One interceptor per backend.
func ExampleWithThrottle() {
	throttled := interceptor.UnaryClient(
		interceptor.WithMaxAttempts(2),
		interceptor.WithThrottle(interceptor.Throttle{K: 2}), // send up to twice what the server accepts
	)
	cc, err := grpc.NewClient("127.0.0.1:50051",
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithChainUnaryInterceptor(throttled))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer cc.Close()
	fmt.Println("client ready")
	// Output: client ready
}
