package main

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/floodgate-go/floodgate/internal/shoppb"
)

// TestReadmeHasSnippet keeps examples/README.md and docs/chain.md (the chain
// wired by hand) in step with main.go.
func TestReadmeHasSnippet(t *testing.T) {
	src, err := os.ReadFile("main.go")
	if err != nil {
		t.Fatal(err)
	}
	readme, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	s := string(src)
	start, end := strings.Index(s, "// snippet:start\n"), strings.Index(s, "// snippet:end")
	if start < 0 || end < start {
		t.Fatal("main.go lacks the snippet markers")
	}
	snippet := strings.TrimSpace(s[start+len("// snippet:start\n") : end])
	if n := strings.Count(snippet, "\n") + 1; n > 25 {
		t.Errorf("snippet is %d lines; keep it short", n)
	}
	if !strings.Contains(string(readme), snippet) {
		t.Errorf("README.md does not contain the snippet of snippet/main.go verbatim:\n%s", snippet)
	}
	chain, err := os.ReadFile("../../docs/chain.md")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(chain), snippet) {
		t.Errorf("docs/chain.md does not contain the snippet of snippet/main.go verbatim:\n%s", snippet)
	}
}

type shop struct{ shoppb.UnimplementedShopServer }

func (shop) Search(context.Context, *shoppb.SearchRequest) (*shoppb.SearchReply, error) {
	return &shoppb.SearchReply{}, nil
}

// TestSnippetLimits checks the snippet's servers limit: one address gets
// ip-safety-net's burst of 100, then 429 (HTTP) or RESOURCE_EXHAUSTED (gRPC).
func TestSnippetLimits(t *testing.T) {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/items/{id}", func(http.ResponseWriter, *http.Request) {})
	srv, handler, err := newServers("../policy.yaml", mux)
	if err != nil {
		t.Fatal(err)
	}
	var first429 int
	for i := 1; i <= 1000 && first429 == 0; i++ {
		rec := httptest.NewRecorder()
		handler.ServeHTTP(rec, httptest.NewRequest("GET", "/v1/items/7", nil))
		if rec.Code == http.StatusTooManyRequests {
			first429 = i
		}
	}
	if first429 <= 100 {
		t.Errorf("HTTP: first 429 at request %d, want after ip-safety-net's burst of 100", first429)
	}

	shoppb.RegisterShopServer(srv, shop{})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(ln)
	defer srv.Stop()
	conn, err := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	client := shoppb.NewShopClient(conn)
	var denied int
	for i := 1; i <= 1000 && denied == 0; i++ {
		_, err := client.Search(t.Context(), &shoppb.SearchRequest{})
		if status.Code(err) == codes.ResourceExhausted {
			denied = i
		} else if err != nil {
			t.Fatal(err)
		}
	}
	if denied <= 100 {
		t.Errorf("gRPC: first RESOURCE_EXHAUSTED at call %d, want after ip-safety-net's burst of 100", denied)
	}
}
