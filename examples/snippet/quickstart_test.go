package main

import (
	"context"
	"errors"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/floodgate-go/floodgate/internal/shoppb"
	"github.com/floodgate-go/floodgate/testing/redistest"
)

const quickstartPolicy = `
tiers:
  free: {rate: 2/1h}
  pro:  {rate: 4/1h}
default_tier: free
rules:
  - name: items-user
    match: {method: "GET /v1/items/{id}"}
    key: [user]
    rate: 3/1h
  - name: search-plan
    match: {method: /floodgate.shop.v1.Shop/Search}
    key: [tenant]
    rate: tier
`

// TestQuickstart runs the README's first-screen service on a real
// redis-server: the HTTP rule keyed on the user applies per user, and
// the gRPC rule keyed on the tenant at the tenant's plan tier.
func TestQuickstart(t *testing.T) {
	srv := redistest.Start(t)
	t.Setenv("REDIS_URL", "redis://"+srv.Addr())
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "policy.yaml"), []byte(quickstartPolicy), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Chdir(dir)

	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/items/{id}", func(http.ResponseWriter, *http.Request) {})
	httpLn, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	grpcLn, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() {
		served <- serve(context.Background(), httpLn, grpcLn, mux, func(s *grpc.Server) { shoppb.RegisterShopServer(s, shop{}) })
	}()

	for _, user := range []string{"ana", "bo"} {
		got := map[int]int{}
		for range 5 {
			req, _ := http.NewRequest("GET", "http://"+httpLn.Addr().String()+"/v1/items/7", nil)
			req.Header.Set("x-user-id", user)
			res, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			res.Body.Close()
			got[res.StatusCode]++
		}
		if got[200] != 3 || got[429] != 2 {
			t.Errorf("user %s: %v, want 3 admitted and 2 denied", user, got)
		}
	}

	conn, err := grpc.NewClient(grpcLn.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	client := shoppb.NewShopClient(conn)
	for tenant, want := range map[string]int{"free-co": 2, "pro-co": 4} {
		plan := "free"
		if tenant == "pro-co" {
			plan = "pro"
		}
		ctx := metadata.AppendToOutgoingContext(context.Background(), "x-tenant-id", tenant, "x-plan", plan)
		ok := 0
		for range 6 {
			_, err := client.Search(ctx, &shoppb.SearchRequest{})
			switch status.Code(err) {
			case codes.OK:
				ok++
			case codes.ResourceExhausted:
			default:
				t.Fatal(err)
			}
		}
		if ok != want {
			t.Errorf("tenant %s on %s: %d of 6 admitted, want %d", tenant, plan, ok, want)
		}
	}

	httpLn.Close()
	if err := <-served; err == nil || !errors.Is(err, net.ErrClosed) {
		t.Errorf("serve returned %v, want the closed listener's error", err)
	}
}
