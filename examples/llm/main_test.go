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

// The policy's token budgets (their bursts and, on a frozen clock, the
// whole budgets).
const (
	inputBudget  = 30000
	outputBudget = 20000
)

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

// left reads what tenant has left in the bucket of rule, charging
// nothing.
func left(t *testing.T, store quota.Store, policy *tiers.Policy, tenant, rule string) int64 {
	t.Helper()
	l, err := tiers.NewLimiter(store, policy)
	if err != nil {
		t.Fatal(err)
	}
	for _, b := range l.Buckets(nil, &floodgate.Request{Method: Route, Identity: floodgate.Identity{Tenant: tenant}}) {
		if b.Rule == rule {
			b.Cost = 0
			var res [1]quota.Result
			if _, err := store.Take(context.Background(), []quota.Bucket{b}, res[:]); err != nil {
				t.Fatal(err)
			}
			return res[0].Remaining
		}
	}
	t.Fatalf("no %s bucket", rule)
	return 0
}

// quotaHolds sends 45 completions of varying size for each of three
// tenants on a frozen clock, and checks every decision against the model
// of the two budgets: a request is admitted iff both its estimates fit
// what the tenant has left (its prompt's bytes of input tokens, its
// max_tokens of output tokens), and then costs exactly the tokens it read
// at the input budget and the tokens it generated at the output budget; a
// request either budget denies costs nothing at either. Both buckets end
// with exactly what the model says, and the tokens used by admitted
// requests never exceed a budget. Each budget denies some requests.
func quotaHolds(t *testing.T, store quota.Store, clk *clock.Fake) {
	policy := mustPolicy(t)
	h, err := newHandler(store, policy, clk)
	if err != nil {
		t.Fatal(err)
	}
	g := uint64(42)
	next := func(n int64) int64 { g = g*6364136223846793005 + 1442695040888963407; return int64(g>>33) % n }
	byInput, byOutput := 0, 0
	for _, tenant := range []string{"acme", "globex", "initech"} {
		in, out := int64(inputBudget), int64(outputBudget) // the model
		var read, generated int64
		admitted := 0
		for i := range 45 { // under the 50 requests a tenant may make at once
			maxTokens := 256 + next(1793) // 256 .. 2048
			prompt := fmt.Sprintf("%s request %d: %s", tenant, i, strings.Repeat("lorem ", int(next(1000))))
			rec := post(t, h, tenant, prompt, maxTokens)
			inFits, outFits := int64(len(prompt)) <= in, maxTokens <= out
			switch {
			case inFits && outFits && rec.Code == http.StatusOK:
				var resp completionResponse
				if err := json.Unmarshal(rec.Body.Bytes(), &resp); err != nil {
					t.Fatal(err)
				}
				u := resp.Usage
				if u.OutputTokens != Tokens(prompt, maxTokens) || u.OutputTokens > maxTokens || u.InputTokens != PromptTokens(prompt) || u.InputTokens > int64(len(prompt)) {
					t.Fatalf("%s %d: usage %+v, want %d (<= %d) in and %d (<= %d) out", tenant, i, u, PromptTokens(prompt), len(prompt), Tokens(prompt, maxTokens), maxTokens)
				}
				in -= u.InputTokens
				out -= u.OutputTokens
				read += u.InputTokens
				generated += u.OutputTokens
				admitted++
			case !(inFits && outFits) && rec.Code == http.StatusTooManyRequests:
				if rec.Header().Get("Retry-After") == "" {
					t.Fatalf("%s %d: 429 without Retry-After", tenant, i)
				}
				if !inFits {
					byInput++
				}
				if !outFits {
					byOutput++
				}
			default:
				t.Fatalf("%s %d: %d bytes of prompt with %d input tokens left, max_tokens %d with %d output tokens left: status %d",
					tenant, i, len(prompt), in, maxTokens, out, rec.Code)
			}
			if got := left(t, store, policy, tenant, "tenant-input-tokens"); got != in {
				t.Fatalf("%s %d: the input bucket holds %d, the model %d", tenant, i, got, in)
			}
			if got := left(t, store, policy, tenant, "tenant-output-tokens"); got != out {
				t.Fatalf("%s %d: the output bucket holds %d, the model %d", tenant, i, got, out)
			}
		}
		if read > inputBudget || read != inputBudget-in || generated > outputBudget || generated != outputBudget-out {
			t.Fatalf("%s: %d tokens read and %d generated for admitted requests, budgets %d and %d, %d and %d left", tenant, read, generated, inputBudget, outputBudget, in, out)
		}
		if admitted < 10 {
			t.Fatalf("%s: %d admitted", tenant, admitted)
		}
		t.Logf("%s: %d admitted (%d of %d input tokens read, %d of %d output tokens generated)", tenant, admitted, read, inputBudget, generated, outputBudget)
	}
	if byInput == 0 || byOutput == 0 {
		t.Fatalf("denials: %d by the input budget, %d by the output budget: the trace does not reach both", byInput, byOutput)
	}
	t.Logf("denials: %d by the input budget, %d by the output budget", byInput, byOutput)
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
	if resp.StatusCode != http.StatusOK || json.Unmarshal(body, &cr) != nil || cr.Usage.OutputTokens != Tokens("write a haiku about queues", 256) || cr.Usage.InputTokens != PromptTokens("write a haiku about queues") {
		t.Fatalf("%d %s", resp.StatusCode, body)
	}
	if !strings.Contains(resp.Header.Get("RateLimit-Policy"), "tenant-") {
		t.Fatalf("RateLimit-Policy %q", resp.Header.Get("RateLimit-Policy"))
	}
}
