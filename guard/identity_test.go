package guard

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// get sends n GET requests to url with the headers h and counts the
// answers by status.
func get(t *testing.T, url string, h map[string]string, n int) map[int]int {
	t.Helper()
	got := map[int]int{}
	for range n {
		req, err := http.NewRequest(http.MethodGet, url, nil)
		if err != nil {
			t.Fatal(err)
		}
		for k, v := range h {
			req.Header.Set(k, v)
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

// identityServer serves a mux behind a Guard built from policy and opts.
func identityServer(t *testing.T, policy string, opts ...Option) string {
	t.Helper()
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/items", func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusOK) })
	g, err := New(context.Background(), append([]Option{WithInProcess(), WithLogger(quiet), WithServeMux(mux), WithPolicy([]byte(policy))}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { g.Close(context.Background()) })
	srv := httptest.NewServer(g.HTTP(mux))
	t.Cleanup(srv.Close)
	return srv.URL + "/v1/items"
}

// TestIdentityFromThePolicyFile: the file's identity: section is the
// tenant's source (no Go option), each tenant has its own bucket, and
// when_missing: deny refuses a request without a tenant, charging no one.
func TestIdentityFromThePolicyFile(t *testing.T) {
	t.Parallel()
	url := identityServer(t, `
identity:
  tenant: header:x-tenant-id
rules:
  - {name: per-tenant, key: [tenant], rate: 2/1h, when_missing: deny}
`)
	if got := get(t, url, map[string]string{"X-Tenant-Id": "acme"}, 3); got[200] != 2 || got[429] != 1 {
		t.Errorf("acme: %v, want 2 admitted, 1 denied", got)
	}
	if got := get(t, url, map[string]string{"X-Tenant-Id": "globex"}, 2); got[200] != 2 {
		t.Errorf("globex: %v, want its own 2", got)
	}
	if got := get(t, url, nil, 2); got[429] != 2 {
		t.Errorf("no tenant: %v, want denied (when_missing: deny)", got)
	}
}

// TestIdentityClaims: a claim source reads the claims WithClaims finds
// in the context, and is refused at New without WithClaims.
func TestIdentityClaims(t *testing.T) {
	t.Parallel()
	const policy = `
identity:
  user: [claim:sub, header:x-user-id]
rules:
  - {name: per-user, key: [user], rate: 1/1h}
`
	_, err := New(context.Background(), WithInProcess(), WithLogger(quiet), WithPolicy([]byte(policy)))
	if err == nil || !strings.Contains(err.Error(), "guard: policy identity.user: claim:sub needs WithClaims") {
		t.Fatalf("claim without WithClaims: %v", err)
	}
	type subKey struct{}
	claims := func(ctx context.Context) (map[string]any, bool) {
		sub, ok := ctx.Value(subKey{}).(string)
		return map[string]any{"sub": sub}, ok
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/items", func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusOK) })
	g, err := New(context.Background(), WithInProcess(), WithLogger(quiet), WithServeMux(mux), WithPolicy([]byte(policy)), WithClaims(claims))
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close(context.Background())
	// An auth middleware of the service's own puts the verified subject
	// in the context, outside the Guard.
	auth := func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if sub := r.Header.Get("x-test-token"); sub != "" {
				r = r.WithContext(context.WithValue(r.Context(), subKey{}, sub))
			}
			next.ServeHTTP(w, r)
		})
	}
	srv := httptest.NewServer(auth(g.HTTP(mux)))
	defer srv.Close()
	url := srv.URL + "/v1/items"
	if got := get(t, url, map[string]string{"x-test-token": "alice"}, 2); got[200] != 1 || got[429] != 1 {
		t.Errorf("alice by claim: %v, want 1 admitted, 1 denied", got)
	}
	// The claim comes first: a header naming alice is bob's request
	// when the token says bob.
	if got := get(t, url, map[string]string{"x-test-token": "bob", "x-user-id": "alice"}, 1); got[200] != 1 {
		t.Errorf("bob by claim, alice by header: %v, want admitted on bob's bucket", got)
	}
	// Without a token the header is the source.
	if got := get(t, url, map[string]string{"x-user-id": "alice"}, 1); got[429] != 1 {
		t.Errorf("alice by header: %v, want alice's bucket, spent", got)
	}
}

// TestIdentityClientIP: behind a trusted proxy (the test's loopback
// client) the forwarded address names the bucket, at the section's IPv4
// prefix: two addresses of one /24 share it.
func TestIdentityClientIP(t *testing.T) {
	t.Parallel()
	url := identityServer(t, `
identity:
  client_ip:
    header: x-real-ip
    trusted_proxies: [127.0.0.0/8, "::1"]
    ipv4_prefix: 24
rules:
  - {name: per-ip, key: [ip], rate: 2/1h}
`)
	if got := get(t, url, map[string]string{"X-Real-IP": "198.51.100.7"}, 1); got[200] != 1 {
		t.Errorf("first: %v", got)
	}
	if got := get(t, url, map[string]string{"X-Real-IP": "198.51.100.9"}, 2); got[200] != 1 || got[429] != 1 {
		t.Errorf("same /24: %v, want 1 admitted, 1 denied", got)
	}
	if got := get(t, url, map[string]string{"X-Real-IP": "203.0.113.1"}, 2); got[200] != 2 {
		t.Errorf("another /24: %v, want its own 2", got)
	}
}
