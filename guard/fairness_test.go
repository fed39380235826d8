package guard

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/shedder"
)

// The policy's shedder: fairness: reaches the shedder through the
// identity: section: with reads shed from 8 in flight (capacity 10) and
// a noisy tenant holding all 8, the noisy tenant's next read is shed and
// a quiet tenant's is served.
func TestFairnessFromThePolicyFile(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/items", func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("X-Hold") != "" {
			<-release
		}
		w.WriteHeader(http.StatusOK)
	})
	g, err := New(context.Background(), WithInProcess(), WithLogger(quiet), WithServeMux(mux), WithPolicy([]byte(`
identity:
  tenant: header:x-tenant-id
shedder:
  capacity: 10
  fairness: {by: tenant}
rules: []
`)))
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close(context.Background())
	srv := httptest.NewServer(g.HTTP(mux))
	defer srv.Close()
	var wg sync.WaitGroup
	defer wg.Wait()
	defer close(release)
	for range 8 {
		wg.Go(func() {
			get(t, srv.URL+"/v1/items", map[string]string{"X-Tenant-Id": "noisy", "X-Hold": "1"}, 1)
		})
	}
	deadline := time.Now().Add(5 * time.Second)
	for g.Shedder().InFlight() < 8 {
		if time.Now().After(deadline) {
			t.Fatalf("%d in flight after 5s, want 8", g.Shedder().InFlight())
		}
		time.Sleep(time.Millisecond)
	}
	if got := get(t, srv.URL+"/v1/items", map[string]string{"X-Tenant-Id": "noisy"}, 1); got[503] != 1 {
		t.Fatalf("noisy's ninth read: %v, want 503", got)
	}
	if got := get(t, srv.URL+"/v1/items", map[string]string{"X-Tenant-Id": "quiet"}, 1); got[200] != 1 {
		t.Fatalf("quiet's read beside it: %v, want 200", got)
	}
}

// Fairness by an identity nothing fills is refused at New, naming it.
func TestFairnessWithoutItsIdentity(t *testing.T) {
	t.Parallel()
	for _, policy := range []string{
		"shedder: {capacity: 10, fairness: {by: tenant}}\nrules: []\n",
		"concurrency: {global: 10, wait: {max: 10ms, fairness: {by: user}}}\nrules: []\n",
	} {
		_, err := New(context.Background(), WithInProcess(), WithLogger(quiet), WithPolicy([]byte(policy)))
		if err == nil || !strings.Contains(err.Error(), "fairness.by: ") || !strings.Contains(err.Error(), "the transport fills no ") {
			t.Errorf("New with %q: %v, want the fairness's identity named", policy, err)
		}
	}
}

// A tap runs before the auth middleware, so it cannot see an identity
// read from a claim: fairness by such an identity keeps the shedder in
// the interceptors, and once the tap decides, a change to fairness by one
// is refused.
func TestFairnessAndTheTap(t *testing.T) {
	t.Parallel()
	claims := WithClaims(func(context.Context) (map[string]any, bool) { return nil, false })
	build := func(policy string) *Guard {
		t.Helper()
		g, err := New(context.Background(), WithInProcess(), WithLogger(quiet), claims, WithPolicy([]byte(policy)))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { g.Close(context.Background()) })
		return g
	}
	if g := build("identity: {tenant: claim:org}\nshedder: {capacity: 10, fairness: {by: tenant}}\nrules: []\n"); g.tap {
		t.Error("fairness by a claim's tenant: the shedder decides at the tap")
	}
	if g := build("identity: {tenant: header:x-tenant}\nshedder: {capacity: 10, fairness: {by: tenant}}\nrules: []\n"); !g.tap {
		t.Error("fairness by a header's tenant: the tap is not used")
	}
	g := build("identity: {tenant: claim:org, user: header:x-user}\nshedder: {capacity: 10}\nrules: []\n")
	if !g.tap {
		t.Fatal("no fairness: the tap is not used")
	}
	err := g.Shedder().Reconfigure(shedder.Config{Capacity: 10, Fairness: &floodgate.Fairness{By: "tenant"}})
	if err == nil || !strings.Contains(err.Error(), "fairness.by: tenant: the transport fills no tenant where the stage decides") {
		t.Fatalf("fairness by the claim's tenant with the tap deciding: %v", err)
	}
	if err := g.Shedder().Reconfigure(shedder.Config{Capacity: 10, Fairness: &floodgate.Fairness{By: "user"}}); err != nil {
		t.Fatalf("fairness by the header's user: %v", err)
	}
}
