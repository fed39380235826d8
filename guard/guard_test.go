package guard

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sony/gobreaker/v2"

	"github.com/floodgate-go/floodgate/interceptor"
	"github.com/floodgate-go/floodgate/testing/redistest"
)

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

const oneRule = `
rules:
  - name: all
    rate: 10/1h
    burst: 10
`

const tenantRule = `
rules:
  - name: per-tenant
    key: [tenant]
    rate: 10/1m
`

// TestIdentityWithASource: the rule TestNewRefusesWhatIsMissing refuses
// without a tenant source loads with one.
func TestIdentityWithASource(t *testing.T) {
	t.Parallel()
	g, err := New(context.Background(), WithPolicy([]byte(tenantRule)), WithInProcess(), WithLogger(quiet),
		WithInterceptor(interceptor.WithTenant(interceptor.FromHeader("x-tenant-id"))))
	if err != nil {
		t.Fatal(err)
	}
	g.Close(context.Background())
}

func TestNewRefusesWhatIsMissing(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		opts []Option
		want string
	}{
		{"no policy", []Option{WithInProcess()}, "exactly one of WithPolicyFile and WithPolicy (0 given)"},
		{"two policies", []Option{WithPolicy([]byte(oneRule)), WithPolicyFile("p.yaml"), WithInProcess()}, "(2 given)"},
		{"no store", []Option{WithPolicy([]byte(oneRule))}, "no store: WithRedisURL or WithRedisClient for a fleet, WithInProcess for one instance"},
		{"two stores", []Option{WithPolicy([]byte(oneRule)), WithInProcess(), WithRedisURL("redis://127.0.0.1:1"), WithService("s")}, "give one of WithRedisURL, WithRedisClient and WithInProcess"},
		{"empty Redis URL", []Option{WithPolicy([]byte(oneRule)), WithRedisURL(""), WithService("s")}, "WithRedisURL: empty URL (REDIS_URL unset?); for one instance without Redis, use WithInProcess"},
		{"Redis without a service", []Option{WithPolicy([]byte(oneRule)), WithRedisURL("redis://127.0.0.1:1")}, "WithService is required with Redis"},
		{"bad service", []Option{WithPolicy([]byte(oneRule)), WithRedisURL("redis://127.0.0.1:1"), WithService("a}b")}, `WithService: "a}b" holds '}'`},
		{"nil option", []Option{nil, WithPolicy([]byte(oneRule)), WithInProcess()}, "nil Option"},
		{"bad policy", []Option{WithPolicy([]byte("rules:\n  - name: x\n    rate: 5/minute\n")), WithInProcess()}, "at line 3"},
		{"empty key prefix", []Option{WithPolicy([]byte(oneRule)), WithRedisURL("redis://127.0.0.1:1"), WithService("s"), WithKeyPrefix("")}, "WithKeyPrefix: empty prefix"},
		{"key prefix with a hash tag", []Option{WithPolicy([]byte(oneRule)), WithRedisURL("redis://127.0.0.1:1"), WithService("s"), WithKeyPrefix("env{a}:")}, `WithKeyPrefix: "env{a}:" holds '{' or '}'`},
		{"key prefix in process", []Option{WithPolicy([]byte(oneRule)), WithInProcess(), WithKeyPrefix("env:")}, "WithKeyPrefix needs Redis"},
		{"nil breaker func", []Option{WithPolicy([]byte(oneRule)), WithRedisURL("redis://127.0.0.1:1"), WithService("s"), WithOnBreakerChange(nil)}, "WithOnBreakerChange: nil func"},
		{"breaker func in process", []Option{WithPolicy([]byte(oneRule)), WithInProcess(), WithOnBreakerChange(func(string, gobreaker.State, gobreaker.State) {})}, "WithOnBreakerChange needs Redis"},
		{"identity without a source", []Option{WithPolicy([]byte(tenantRule)), WithInProcess()}, `rule "per-tenant" (rules[0], line 3) is keyed on tenant, which the grpc and http transport never fills`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			g, err := New(context.Background(), tc.opts...)
			if err == nil {
				g.Close(context.Background())
				t.Fatal("no error")
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %q does not say %q", err, tc.want)
			}
		})
	}
}

// statuses sends n GET requests to url and counts the answers by status.
func statuses(t *testing.T, url string, n int) map[int]int {
	t.Helper()
	got := map[int]int{}
	for range n {
		res, err := http.Get(url)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		got[res.StatusCode]++
	}
	return got
}

func TestInProcessHTTP(t *testing.T) {
	t.Parallel()
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/items/{id}", func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusOK) })
	mux.HandleFunc("GET /v1/other", func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusOK) })
	g, err := New(context.Background(), WithInProcess(), WithLogger(quiet), WithServeMux(mux), WithPolicy([]byte(`
rules:
  - name: items
    match: {method: "GET /v1/items/{id}"}
    rate: 3/1h
`)))
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close(context.Background())
	top := http.NewServeMux()
	top.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusOK) })
	top.Handle("/", g.HTTP(mux))
	srv := httptest.NewServer(top)
	defer srv.Close()
	if got := statuses(t, srv.URL+"/v1/items/7", 5); got[200] != 3 || got[429] != 2 {
		t.Errorf("items: %v, want 3 admitted and 2 denied (the rule applies under an outer router)", got)
	}
	if got := statuses(t, srv.URL+"/v1/other", 5); got[200] != 5 {
		t.Errorf("other route: %v, want every request admitted", got)
	}
	if g.Store() != "in process" {
		t.Errorf("Store() = %q", g.Store())
	}
}

// TestChainOrder checks the stages' order: shedder, in-flight limiter,
// rate limits, so a request shed or refused a slot is never charged.
func TestChainOrder(t *testing.T) {
	t.Parallel()
	g, err := New(context.Background(), WithInProcess(), WithLogger(quiet), WithPolicy([]byte(oneRule+`
concurrency:
  adaptive: {min: 4, max: 64}
`)))
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close(context.Background())
	var stages []string
	for _, a := range g.chain {
		stages = append(stages, strings.TrimPrefix(typeName(a), "*"))
	}
	want := "shedder.Shedder concurrency.Limiter concurrency.Adaptive tiers.Limiter"
	if got := strings.Join(stages, " "); got != want {
		t.Errorf("chain %s, want %s", got, want)
	}
}

// TestPolicyFileWatched edits the policy file and sees the new limit
// applied, then writes a broken file and sees the old one stay.
func TestPolicyFileWatched(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "policy.yaml")
	write := func(s string) {
		if err := os.WriteFile(path+".tmp", []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(path+".tmp", path); err != nil {
			t.Fatal(err)
		}
	}
	write("rules:\n  - {name: all, rate: 1/1h}\n")
	var logs syncBuffer
	logger := slog.New(slog.NewTextHandler(&logs, nil))
	g, err := New(context.Background(), WithInProcess(), WithLogger(logger), WithPolicyFile(path), WithPolicyInterval(10*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close(context.Background())
	write("rules:\n  - {name: all, rate: 2/1h}\n")
	waitFor(t, "the new rate", func() bool { return g.Limiter().Policy().Rules[0].Rate.N == 2 })
	write("rules:\n  - {name: all, rate: 2/forever}\n")
	waitFor(t, "log of the refused reload", func() bool {
		return strings.Contains(logs.String(), "policy reload failed; the previous policy stays in force")
	})
	if got := g.Limiter().Policy().Rules[0].Rate.N; got != 2 {
		t.Errorf("after a broken file the rate is %d/1h, want 2/1h in force", got)
	}
}

// syncBuffer is a bytes.Buffer safe for the logger's goroutine and the
// test's.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("no %s within 10s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestRedisFleetShare is the fleet-safety default: two instances of one
// service on one Redis count each other, and with Redis killed each
// decides locally with half the limit, so the fleet admits the limit,
// not twice it. A third instance of another service does not count.
func TestRedisFleetShare(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	url := "redis://" + srv.Addr()
	policy := WithPolicy([]byte(oneRule))
	var gs []*Guard
	for _, service := range []string{"shop", "shop", "billing"} {
		g, err := New(context.Background(), WithRedisURL(url), WithService(service), WithLogger(quiet), policy)
		if err != nil {
			t.Fatal(err)
		}
		defer g.Close(context.Background())
		gs = append(gs, g)
	}
	waitFor(t, "count of 2 shop instances", func() bool { return gs[0].members.Count() == 2 && gs[1].members.Count() == 2 })
	if n := gs[2].members.Count(); n != 1 {
		t.Errorf("the billing instance counts %d instances, want 1", n)
	}
	srv.Kill()
	admitted := 0
	for _, g := range gs[:2] {
		h := httptest.NewServer(g.HTTP(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {})))
		got := statuses(t, h.URL, 10)
		h.Close()
		admitted += got[200]
	}
	// 10/1h burst 10 shared by 2: 5 each; a refill takes 12 minutes.
	if admitted != 10 {
		t.Errorf("with Redis down the fleet of 2 admitted %d of 20, want 10 (the limit, not twice it)", admitted)
	}
}
