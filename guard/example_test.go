package guard_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"

	"github.com/floodgate-go/floodgate/guard"
)

// One instance, limits in process: a route admits two requests an hour
// per client address.
func Example() {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/items/{id}", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprint(w, "item") })

	g, err := guard.New(context.Background(),
		guard.WithPolicy([]byte(`
rules:
  - name: items
    match: {method: "GET /v1/items/{id}"}
    key: [ip]
    rate: 2/1h
`)),
		guard.WithInProcess(), // a fleet: guard.WithRedisURL(os.Getenv("REDIS_URL")), guard.WithService("shop")
		guard.WithServeMux(mux),
	)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer g.Close(context.Background())

	srv := httptest.NewServer(g.HTTP(mux))
	defer srv.Close()
	for range 3 {
		res, err := http.Get(srv.URL + "/v1/items/7")
		if err != nil {
			fmt.Println(err)
			return
		}
		res.Body.Close()
		fmt.Println(res.Status)
	}
	// Output:
	// 200 OK
	// 200 OK
	// 429 Too Many Requests
}
