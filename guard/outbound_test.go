package guard_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate/guard"
	"github.com/floodgate-go/floodgate/interceptor"
	"github.com/floodgate-go/floodgate/testing/redistest"
)

// Two guards (two replicas) on one real redis-server share the outbound
// rule and the cooldown: the rule's three calls an hour are spent across
// both, and a vendor's 429 with Retry-After: 30 seen by one stops the
// other, whose first call reads the cooldown, before it sends anything.
func TestOutboundFleetWide(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	var hits atomic.Int64
	vendor := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { hits.Add(1) }))
	t.Cleanup(vendor.Close)
	// A second host, which refuses: its cooldown is its own.
	refusing := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		w.Header().Set("Retry-After", "30")
		w.WriteHeader(http.StatusTooManyRequests)
	}))
	t.Cleanup(refusing.Close)
	policy := []byte(`
rules: []
outbound:
  rules:
    - name: vendor
      match: {method: "/127.0.0.1:*/v1/*"}
      rate: 3/1h
`)
	var clients [2]*http.Client
	for i := range clients {
		g, err := guard.New(context.Background(), guard.WithPolicy(policy),
			guard.WithRedisURL("redis://"+srv.Addr()), guard.WithService("outbound-test"))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = g.Close(context.Background()) })
		clients[i] = &http.Client{Transport: g.RoundTripper(nil)}
	}
	call := func(c *http.Client, url string) (int, error) {
		res, err := c.Get(url)
		if err != nil {
			return 0, err
		}
		_, _ = io.Copy(io.Discard, res.Body)
		_ = res.Body.Close()
		return res.StatusCode, nil
	}
	for i, c := range []*http.Client{clients[0], clients[0], clients[1]} {
		if code, err := call(c, vendor.URL+"/v1/chat"); err != nil || code != 200 {
			t.Fatalf("call %d: %d, %v", i, code, err)
		}
	}
	for i, c := range clients {
		if _, err := call(c, vendor.URL+"/v1/chat"); !interceptor.IsClientThrottled(err) {
			t.Fatalf("replica %d past the fleet's 3 calls: %v, want refused", i, err)
		}
	}
	if n := hits.Load(); n != 3 {
		t.Fatalf("the vendor received %d calls, want 3", n)
	}

	// The cooldown, on a host replica 1 never called: replica 0 sees the
	// 429, replica 1 never sends.
	if code, err := call(clients[0], refusing.URL+"/v2/chat"); err != nil || code != 429 {
		t.Fatalf("the vendor's 429: %d, %v", code, err)
	}
	_, err := call(clients[1], refusing.URL+"/v2/other")
	d, ok := interceptor.RetryDelay(err, nil)
	if !interceptor.IsClientThrottled(err) || !ok || d <= 0 || d > 30*time.Second {
		t.Fatalf("replica 1 during replica 0's cooldown: %v (delay %v), want refused with at most 30s left", err, d)
	}
	if n := hits.Load(); n != 4 {
		t.Fatalf("the vendor received %d calls, want 4", n)
	}
	if v, err := srv.Client().Exists(context.Background(), "fg:out:cool:{"+refusing.Listener.Addr().String()+"}").Result(); err != nil || v != 1 {
		t.Fatalf("cooldown key: %v, %v", v, err)
	}
}

// A reload that adds the outbound: section turns the cooldown on: before
// it a vendor's 429 stops nothing, after it the next call is not sent.
func TestOutboundCooldownFollowsReload(t *testing.T) {
	t.Parallel()
	var hits atomic.Int64
	vendor := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		w.Header().Set("Retry-After", "30")
		w.WriteHeader(http.StatusTooManyRequests)
	}))
	t.Cleanup(vendor.Close)
	path := filepath.Join(t.TempDir(), "policy.yaml")
	if err := os.WriteFile(path, []byte("rules: []\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	g, err := guard.New(context.Background(), guard.WithInProcess(), guard.WithPolicyFile(path), guard.WithPolicyInterval(10*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = g.Close(context.Background()) })
	c := &http.Client{Transport: g.RoundTripper(nil)}
	get := func() error {
		res, err := c.Get(vendor.URL + "/v1/chat")
		if err == nil {
			_ = res.Body.Close()
		}
		return err
	}
	for range 2 {
		if err := get(); err != nil {
			t.Fatalf("without an outbound: section: %v, want the vendor's 429", err)
		}
	}
	if n := hits.Load(); n != 2 {
		t.Fatalf("the vendor received %d calls, want 2", n)
	}
	if err := os.WriteFile(path+".tmp", []byte("rules: []\noutbound:\n  cooldown: {max: 1m}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(path+".tmp", path); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		before := hits.Load()
		err := get()
		if interceptor.IsClientThrottled(err) {
			if n := hits.Load(); n != before {
				t.Fatalf("a refused call reached the vendor")
			}
			return
		}
		if err != nil {
			t.Fatalf("a call: %v", err)
		}
		if time.Now().After(deadline) {
			t.Fatal("the reload never turned the cooldown on")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// An outbound rule keyed on an identity nothing provides is refused at
// New, as an inbound one is.
func TestOutboundIdentityChecked(t *testing.T) {
	t.Parallel()
	_, err := guard.New(context.Background(), guard.WithInProcess(), guard.WithPolicy([]byte(`
rules: []
outbound:
  rules:
    - {name: per-user, key: [user], rate: 5/1s}
`)))
	if err == nil || !strings.Contains(err.Error(), "guard: policy outbound:") || !strings.Contains(err.Error(), "per-user") {
		t.Fatalf("New: %v, want the outbound rule per-user refused", err)
	}
	g, err := guard.New(context.Background(), guard.WithInProcess(), guard.WithPolicy([]byte(`
rules: []
identity: {user: header:x-user}
outbound:
  rules:
    - {name: per-user, key: [user], rate: 5/1s}
`)))
	if err != nil {
		t.Fatalf("with identity: user: %v", err)
	}
	_ = g.Close(context.Background())
}
