package guard_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"

	"google.golang.org/grpc/status"

	"github.com/floodgate-go/floodgate/guard"
	"github.com/floodgate-go/floodgate/interceptor"
)

// Calls to a third party behind the policy's outbound: section: its rule
// admits two calls an hour (for the whole fleet, with Redis), and a call
// refused is not sent.
func ExampleGuard_RoundTripper() {
	vendor := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { fmt.Fprint(w, "ok") }))
	defer vendor.Close()

	g, err := guard.New(context.Background(),
		guard.WithPolicy([]byte(`
rules: []
outbound:
  cooldown: {default: 1s, max: 1m}   # a 429 stops every replica's calls to its host
  rules:
    - name: vendor
      match: {method: "/127.0.0.1:*/v1/*"}   # "/HOST/PATH" of the outgoing request
      rate: 2/1h
`)),
		guard.WithInProcess(), // a fleet: guard.WithRedisURL(os.Getenv("REDIS_URL")), guard.WithService("shop")
	)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer g.Close(context.Background())

	client := &http.Client{Transport: g.RoundTripper(nil)}
	for range 3 {
		res, err := client.Get(vendor.URL + "/v1/chat")
		if err != nil {
			st, _ := status.FromError(err)
			fmt.Println("not sent:", interceptor.IsClientThrottled(err), st.Code())
			continue
		}
		res.Body.Close()
		fmt.Println(res.Status)
	}
	// Output:
	// 200 OK
	// 200 OK
	// not sent: true ResourceExhausted
}
