package interceptor_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/interceptor"
)

// docs/denials.md's "Your own error format" section, compiled and tested
// (TestReadmeDenyResponse): the page holds the text between the markers
// verbatim.

// snippet-deny:start
// Kong's format: its error_code as the status, {"message": error_message}
// as the body, and the same message in gRPC statuses. Retry-After, the
// RateLimit fields and the gRPC details are sent as always.
func newKongStyle() (*interceptor.Interceptor, error) {
	const message = "API rate limit exceeded"
	return interceptor.New(interceptor.WithDenyResponse(interceptor.DenyResponse{
		Status: http.StatusTooManyRequests,
		Body: func(_ context.Context, d floodgate.Decision) []byte {
			body, _ := json.Marshal(map[string]any{"message": message, "retry_after_ms": d.RetryAfter.Milliseconds()})
			return body
		},
		Message: func(context.Context, floodgate.Decision) string { return message },
	}))
}

// snippet-deny:end

// denyAll denies every request: a rate limit of 10 a minute, spent, the
// next unit in 1.5 s.
type denyAll struct{}

func (denyAll) Admit(context.Context, *floodgate.Request) (floodgate.Decision, floodgate.Done, error) {
	return floodgate.Decision{Stage: floodgate.StageTiers, Policy: "per-key", Limit: 10, Window: time.Minute, RetryAfter: 1500 * time.Millisecond}, nil, nil
}

// An API with its own error format: a denial's body and status are the
// API's, its headers floodgate's.
func ExampleWithDenyResponse() {
	fg, err := newKongStyle()
	if err != nil {
		panic(err)
	}
	mux := http.NewServeMux()
	mux.Handle("GET /v1/items", fg.HTTP(denyAll{})(http.NotFoundHandler()))
	srv := httptest.NewServer(mux)
	defer srv.Close()

	resp, err := http.Get(srv.URL + "/v1/items")
	if err != nil {
		panic(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	fmt.Println(resp.StatusCode, resp.Header.Get("Content-Type"))
	fmt.Println("Retry-After:", resp.Header.Get("Retry-After"))
	fmt.Println("RateLimit:", resp.Header.Get("RateLimit"))
	fmt.Println(string(body))
	// Output:
	// 429 application/json
	// Retry-After: 2
	// RateLimit: "per-key";r=0;t=2
	// {"message":"API rate limit exceeded","retry_after_ms":1500}
}

// TestReadmeDenyResponse: docs/denials.md carries the snippet verbatim.
func TestReadmeDenyResponse(t *testing.T) {
	page, err := os.ReadFile("../docs/denials.md")
	if err != nil {
		t.Fatal(err)
	}
	src, err := os.ReadFile("deny_example_test.go")
	if err != nil {
		t.Fatal(err)
	}
	_, rest, _ := strings.Cut(string(src), "// snippet-deny:start\n")
	snippet, _, ok := strings.Cut(rest, "// snippet-deny:end")
	if !ok {
		t.Fatal("deny_example_test.go lacks the snippet-deny markers")
	}
	if !strings.Contains(string(page), "```go\n"+strings.TrimSpace(snippet)+"\n```") {
		t.Errorf("docs/denials.md does not contain the deny snippet verbatim, in a go block:\n%s", snippet)
	}
}
