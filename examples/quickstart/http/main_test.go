package main

import (
	"context"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate/testing/redistest"
)

// TestShopHTTP runs the README's HTTP service on a real redis-server
// with the README's policy.yaml, its item rate slowed from 50/1s to 3/1h
// so the counts are exact on real time: each user has its own 3, a
// request without a user is refused (when_missing: deny), and run
// returns nil once its context ends.
func TestShopHTTP(t *testing.T) {
	policy, err := os.ReadFile("../policy.yaml")
	if err != nil {
		t.Fatal(err)
	}
	slowed := strings.Replace(string(policy), "rate: 50/1s", "rate: 3/1h", 1)
	if slowed == string(policy) {
		t.Fatal("policy.yaml has no rate: 50/1s to slow down")
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "policy.yaml"), []byte(slowed), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Chdir(dir)
	t.Setenv("REDIS_URL", "redis://"+redistest.Start(t).Addr())
	addr := freeAddr(t)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- run(ctx, addr) }()
	waitUp(t, addr)

	url := "http://" + addr + "/v1/items/7"
	for _, user := range []string{"ana", "bo"} {
		if got := statuses(t, url, user, 5); got[200] != 3 || got[429] != 2 {
			t.Errorf("user %s: %v, want 3 admitted and 2 denied", user, got)
		}
	}
	if got := statuses(t, url, "", 2); got[429] != 2 {
		t.Errorf("no user: %v, want both refused", got)
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

func statuses(t *testing.T, url, user string, n int) map[int]int {
	t.Helper()
	got := map[int]int{}
	for range n {
		req, err := http.NewRequest(http.MethodGet, url, nil)
		if err != nil {
			t.Fatal(err)
		}
		if user != "" {
			req.Header.Set("x-user-id", user)
		}
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		got[res.StatusCode]++
	}
	return got
}

// freeAddr returns a loopback address whose port was free a moment ago.
func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// waitUp waits until addr accepts connections, for at most 10 s.
func waitUp(t *testing.T, addr string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		c, err := net.Dial("tcp", addr)
		if err == nil {
			c.Close()
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s not up within 10s: %v", addr, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
