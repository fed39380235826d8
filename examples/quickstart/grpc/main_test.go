package main

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/floodgate-go/floodgate/internal/shoppb"
	"github.com/floodgate-go/floodgate/testing/redistest"
)

// shop answers every Search.
type shop struct{ shoppb.UnimplementedShopServer }

func (shop) Search(context.Context, *shoppb.SearchRequest) (*shoppb.SearchReply, error) {
	return &shoppb.SearchReply{}, nil
}

// TestShopGRPC runs the README's gRPC service, the demo's Shop service
// registered in it, on a real redis-server with
// the README's policy.yaml, its tiers slowed from per second to per hour
// so the counts are exact on real time: a free tenant gets 2, a pro
// tenant 4, a call without a tenant is not limited (when_missing: skip),
// and run returns once its context ends.
func TestShopGRPC(t *testing.T) {
	policy, err := os.ReadFile("../policy.yaml")
	if err != nil {
		t.Fatal(err)
	}
	slowed := strings.NewReplacer("free: {rate: 10/1s}", "free: {rate: 2/1h}", "pro: {rate: 100/1s}", "pro: {rate: 4/1h}").Replace(string(policy))
	if strings.Count(slowed, "/1h}") != 2 {
		t.Fatal("policy.yaml's tiers are not free 10/1s and pro 100/1s")
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "policy.yaml"), []byte(slowed), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Chdir(dir)
	t.Setenv("REDIS_URL", "redis://"+redistest.Start(t).Addr())
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, addr, func(s *grpc.Server) { shoppb.RegisterShopServer(s, shop{}) })
	}()

	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	client := shoppb.NewShopClient(conn)
	calls := func(n int, md ...string) map[codes.Code]int {
		got := map[codes.Code]int{}
		for range n {
			cctx, ccancel := context.WithTimeout(metadata.AppendToOutgoingContext(context.Background(), md...), 10*time.Second)
			_, err := client.Search(cctx, &shoppb.SearchRequest{}, grpc.WaitForReady(true))
			ccancel()
			got[status.Code(err)]++
		}
		return got
	}
	if got := calls(3, "x-tenant-id", "acme"); got[codes.OK] != 2 || got[codes.ResourceExhausted] != 1 {
		t.Errorf("free tenant: %v, want 2 OK, 1 refused", got)
	}
	if got := calls(5, "x-tenant-id", "globex", "x-plan", "pro"); got[codes.OK] != 4 || got[codes.ResourceExhausted] != 1 {
		t.Errorf("pro tenant: %v, want 4 OK, 1 refused", got)
	}
	if got := calls(5); got[codes.OK] != 5 {
		t.Errorf("no tenant: %v, want every call (when_missing: skip)", got)
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("run: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("run did not return within 10s of its context's end")
	}
}
