package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/examples/internal/exampletest"
	"github.com/floodgate-go/floodgate/quota"
	"github.com/floodgate-go/floodgate/testing/clock"
	"github.com/floodgate-go/floodgate/testing/redistest"
	"github.com/floodgate-go/floodgate/tiers"
	"github.com/floodgate-go/floodgate/tiers/memstore"
	"github.com/floodgate-go/floodgate/tiers/redisstore"
)

// budget is the policy's tenant-tokens burst (and, on a frozen clock, the
// whole budget).
const budget = 20000

func mustPolicy(t *testing.T) *tiers.Policy {
	t.Helper()
	p, err := loadPolicy("")
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// post sends one completion request to h.
func post(t *testing.T, h http.Handler, tenant, prompt string, maxTokens int64) *httptest.ResponseRecorder {
	t.Helper()
	body := fmt.Sprintf(`{"prompt":%q,"max_tokens":%d}`, prompt, maxTokens)
	req := httptest.NewRequest("POST", "/v1/complete", strings.NewReader(body))
	req.Header.Set("X-Tenant", tenant)
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return rec
}

// left reads what tenant has left of its token budget, charging nothing.
func left(t *testing.T, store quota.Store, policy *tiers.Policy, tenant string) int64 {
	t.Helper()
	l, err := tiers.NewLimiter(store, policy)
	if err != nil {
		t.Fatal(err)
	}
	for _, b := range l.Buckets(nil, &floodgate.Request{Method: Route, Identity: floodgate.Identity{Tenant: tenant}}) {
		if b.Rule == "tenant-tokens" {
			b.Cost = 0
			var res [1]quota.Result
			if _, err := store.Take(context.Background(), []quota.Bucket{b}, res[:]); err != nil {
				t.Fatal(err)
			}
			return res[0].Remaining
		}
	}
	t.Fatal("no tenant-tokens bucket")
	return 0
}

// quotaHolds sends 45 completions of varying size for each of three
// tenants on a frozen clock, and checks every decision against the model
// of the budget: a request is admitted iff its max_tokens (the estimate)
// fits what the tenant has left, and then costs exactly the tokens it
// generated. The tenant's bucket ends with exactly what the model says,
// and the tokens generated for admitted requests never exceed the budget.
func quotaHolds(t *testing.T, store quota.Store, clk *clock.Fake) {
	policy := mustPolicy(t)
	h, err := newHandler(store, policy, clk)
	if err != nil {
		t.Fatal(err)
	}
	g := uint64(42)
	next := func(n int64) int64 { g = g*6364136223846793005 + 1442695040888963407; return int64(g>>33) % n }
	for _, tenant := range []string{"acme", "globex", "initech"} {
		model := int64(budget)
		var generated int64
		admitted, denied := 0, 0
		for i := range 45 { // under the 50 requests a tenant may make at once
			maxTokens := 256 + next(1793) // 256 .. 2048
			prompt := fmt.Sprintf("%s request %d: %d", tenant, i, next(1000))
			rec := post(t, h, tenant, prompt, maxTokens)
			fits := maxTokens <= model
			switch {
			case fits && rec.Code == http.StatusOK:
				var resp completionResponse
				if err := json.Unmarshal(rec.Body.Bytes(), &resp); err != nil {
					t.Fatal(err)
				}
				if want := Tokens(prompt, maxTokens); resp.Usage.Tokens != want || resp.Usage.Tokens > maxTokens {
					t.Fatalf("%s %d: generated %d, want %d (<= %d)", tenant, i, resp.Usage.Tokens, want, maxTokens)
				}
				model -= resp.Usage.Tokens
				generated += resp.Usage.Tokens
				admitted++
			case !fits && rec.Code == http.StatusTooManyRequests:
				if rec.Header().Get("Retry-After") == "" {
					t.Fatalf("%s %d: 429 without Retry-After", tenant, i)
				}
				denied++
			default:
				t.Fatalf("%s %d: max_tokens %d with %d left: status %d, want %s", tenant, i, maxTokens, model,
					rec.Code, map[bool]string{true: "200", false: "429"}[fits])
			}
			if got := left(t, store, policy, tenant); got != model {
				t.Fatalf("%s %d: the bucket holds %d, the model %d", tenant, i, got, model)
			}
		}
		if generated > budget || generated != budget-model {
			t.Fatalf("%s: %d tokens generated for admitted requests, budget %d, %d left", tenant, generated, budget, model)
		}
		if admitted < 10 || denied < 5 {
			t.Fatalf("%s: %d admitted, %d denied: the trace does not reach the budget", tenant, admitted, denied)
		}
		t.Logf("%s: %d admitted (%d tokens generated of %d), %d denied", tenant, admitted, generated, budget, denied)
	}
}

func TestTenantTokenQuotaHolds(t *testing.T) {
	clk := clock.New(time.Time{})
	store, err := memstore.New(memstore.WithClock(clk))
	if err != nil {
		t.Fatal(err)
	}
	quotaHolds(t, store, clk)
}

// The same trace with the budgets in a real Redis, standalone and as a
// 3-master cluster, on the same fake clock (the scripts take its time).
func TestTenantTokenQuotaHoldsInRedis(t *testing.T) {
	for _, kind := range []string{"standalone", "cluster"} {
		t.Run(kind, func(t *testing.T) {
			clk := clock.New(time.Time{})
			var c interface {
				Close() error
			}
			var store *redisstore.Store
			var err error
			if kind == "standalone" {
				cl := redistest.Start(t).Client()
				c = cl
				store, err = redisstore.New(cl, redisstore.WithClock(clk), redisstore.WithMinTTL(time.Minute))
			} else {
				cl := redistest.StartCluster(t).Client()
				c = cl
				store, err = redisstore.New(cl, redisstore.WithClock(clk), redisstore.WithMinTTL(time.Minute))
			}
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { store.Close(); c.Close() })
			quotaHolds(t, store, clk)
		})
	}
}

// A burst over the per-tenant request rate waits for its turn instead of
// failing, and says how long in Server-Timing.
func TestBurstIsShaped(t *testing.T) {
	clk := clock.New(time.Time{})
	store, err := memstore.New(memstore.WithClock(clk))
	if err != nil {
		t.Fatal(err)
	}
	h, err := newHandler(store, mustPolicy(t), clk)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 50 {
		if rec := post(t, h, "acme", "hi", 1); rec.Code != http.StatusOK || rec.Header().Get("Server-Timing") != "" {
			t.Fatalf("request %d: %d %q", i, rec.Code, rec.Header().Get("Server-Timing"))
		}
	}
	got := make(chan *httptest.ResponseRecorder, 1)
	go func() { got <- post(t, h, "acme", "hi", 1) }()
	deadline := time.Now().Add(10 * time.Second)
	for clk.Timers() != 1 {
		if time.Now().After(deadline) {
			t.Fatal("the 51st request did not wait")
		}
		time.Sleep(time.Millisecond)
	}
	clk.Advance(20 * time.Millisecond) // one request per 20 ms at 50/s
	rec := <-got
	if rec.Code != http.StatusOK || rec.Header().Get("Server-Timing") != "floodgate-wait;dur=20" {
		t.Fatalf("the 51st request: %d %q, want 200 after floodgate-wait;dur=20", rec.Code, rec.Header().Get("Server-Timing"))
	}
}

var listening = regexp.MustCompile(`llm example listening on (http://\S+)`)

// The program itself: one completion on a loopback port, answered with its
// usage and the tenant's quota headers.
func TestRun(t *testing.T) {
	out := exampletest.Start(t, run, "-addr", "127.0.0.1:0", "-redis", "")
	api := out.WaitFor(t, listening, 1, 10*time.Second)[1]
	req, err := http.NewRequest("POST", api+"/v1/complete", strings.NewReader(`{"prompt":"write a haiku about queues","max_tokens":256}`))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("X-Tenant", "acme")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	var cr completionResponse
	if resp.StatusCode != http.StatusOK || json.Unmarshal(body, &cr) != nil || cr.Usage.Tokens != Tokens("write a haiku about queues", 256) {
		t.Fatalf("%d %s", resp.StatusCode, body)
	}
	if !strings.Contains(resp.Header.Get("RateLimit-Policy"), "tenant-") {
		t.Fatalf("RateLimit-Policy %q", resp.Header.Get("RateLimit-Policy"))
	}
}
