package guard_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"

	"github.com/floodgate-go/floodgate/guard"
)

// Who is denied right now: a password brute force against one user,
// seen on the admin endpoint that `floodgate top -url` reads.
func ExampleGuard_TopDeniedHandler() {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/login", func(http.ResponseWriter, *http.Request) {})
	g, err := guard.New(context.Background(),
		guard.WithPolicy([]byte(`
identity:
  user: header:x-user
rules:
  - {name: login, match: {method: "POST /v1/login"}, key: [ip, user], rate: 3/1h}
`)),
		guard.WithInProcess(),
		guard.WithServeMux(mux),
	)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer g.Close(context.Background())

	// An admin listener's mux (never behind the guard, never public).
	admin := http.NewServeMux()
	admin.Handle("GET /debug/floodgate/top", g.TopDeniedHandler())

	service := g.HTTP(mux)
	for _, user := range []string{"admin", "admin", "admin", "admin", "admin", "admin", "bob"} {
		req := httptest.NewRequest("POST", "/v1/login", nil)
		req.RemoteAddr = "203.0.113.66:40000"
		req.Header.Set("X-User", user)
		service.ServeHTTP(httptest.NewRecorder(), req)
	}

	w := httptest.NewRecorder()
	admin.ServeHTTP(w, httptest.NewRequest("GET", "/debug/floodgate/top?rule=login&n=5", nil))
	var reply struct{ Top []guard.Denied }
	if err := json.Unmarshal(w.Body.Bytes(), &reply); err != nil {
		fmt.Println(err)
		return
	}
	for _, d := range reply.Top {
		fmt.Printf("%s: %s denied %d times (error %d)\n", d.Rule, d.Principal, d.Count, d.Error)
	}
	// Output:
	// login: ip=203.0.113.66 user=admin denied 3 times (error 0)
}
