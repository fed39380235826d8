package connectmw_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/floodgate-go/floodgate/connectmw"
	"github.com/floodgate-go/floodgate/interceptor"
	"github.com/floodgate-go/floodgate/internal/testpb"
	"github.com/floodgate-go/floodgate/tiers"
)

// docs/integrations.md's "With connect-go" section, compiled and tested:
// the page holds the text between the markers verbatim.

// snippet-connect:start
func newEchoHandler(limits *tiers.Limiter, proxies ...string) (http.Handler, error) {
	fg, err := interceptor.New(
		interceptor.WithDomain("echo.example"),                 // the ErrorInfo domain
		interceptor.WithUser(interceptor.FromHeader("x-user")), // set by your auth layer
		interceptor.WithTrustedProxies(proxies...),
	)
	if err != nil {
		return nil, err
	}
	guard, err := connectmw.NewHandler(fg, limits) // or a floodgate.Chain{shed, conc, limits}
	if err != nil {
		return nil, err
	}
	// Generated code takes the same option: echov1connect.NewEchoHandler(svc, connect.WithInterceptors(guard)).
	const proc = "/floodgate.test.v1.Echo/Plain"
	mux := http.NewServeMux()
	mux.Handle(proc, connect.NewUnaryHandler(proc, echoPlain, connect.WithInterceptors(guard)))
	return mux, nil
}

func newEchoClient(httpClient connect.HTTPClient, baseURL string) (*connect.Client[testpb.EchoRequest, testpb.EchoResponse], error) {
	retry, err := connectmw.NewClient(interceptor.WithMaxAttempts(3)) // honours pushback and RetryInfo
	if err != nil {
		return nil, err
	}
	return connect.NewClient[testpb.EchoRequest, testpb.EchoResponse](httpClient, baseURL+"/floodgate.test.v1.Echo/Plain",
		connect.WithGRPC(), connect.WithInterceptors(retry)), nil
}

// snippet-connect:end

// TestReadmeConnect: docs/integrations.md carries the snippet verbatim,
// and the snippet serves: two calls a minute pass, the third is denied
// with its details.
func TestReadmeConnect(t *testing.T) {
	t.Parallel()
	page, err := os.ReadFile("../docs/integrations.md")
	if err != nil {
		t.Fatal(err)
	}
	src, err := os.ReadFile("readme_test.go")
	if err != nil {
		t.Fatal(err)
	}
	_, rest, _ := strings.Cut(string(src), "// snippet-connect:start\n")
	snippet, _, ok := strings.Cut(rest, "// snippet-connect:end")
	if !ok {
		t.Fatal("readme_test.go lacks the snippet-connect markers")
	}
	if !strings.Contains(string(page), "```go\n"+strings.TrimSpace(snippet)+"\n```") {
		t.Errorf("docs/integrations.md does not contain the connect snippet verbatim, in a go block:\n%s", snippet)
	}

	h, err := newEchoHandler(perUser(t), "10.0.0.0/8")
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(h)
	srv.EnableHTTP2 = true
	srv.StartTLS()
	defer srv.Close()
	c, err := newEchoClient(srv.Client(), srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	req := connect.NewRequest(&testpb.EchoRequest{Message: "m"})
	req.Header().Set("x-user", "erin")
	for range 2 {
		if _, err := c.CallUnary(context.Background(), req); err != nil {
			t.Fatal(err)
		}
	}
	// The denial asks for 30 s, past this call's deadline: the client
	// returns it at once instead of waiting.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, err = c.CallUnary(ctx, req)
	checkDenial(t, err, `rate limit exceeded (policy "per-user"); retry after 30s`)
}
