package main

import (
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate/examples/internal/exampletest"
	"github.com/floodgate-go/floodgate/testing/redistest"
)

var (
	listening = regexp.MustCompile(`http example listening on (http://\S+)`)
	metricsAt = regexp.MustCompile(`metrics: (http://\S+/metrics)`)
	reloaded  = regexp.MustCompile(`msg="floodgate: policy reloaded"`)
)

// start runs the example on free loopback ports with a private copy of the
// policy, and returns the API's base URL, the metrics URL, the policy path
// and the program's output.
func start(t *testing.T, extra ...string) (api, metrics, policy string, out *exampletest.Output) {
	t.Helper()
	data, err := os.ReadFile("../policy.yaml")
	if err != nil {
		t.Fatal(err)
	}
	policy = filepath.Join(t.TempDir(), "policy.yaml")
	if err := os.WriteFile(policy, data, 0o644); err != nil {
		t.Fatal(err)
	}
	args := append([]string{"-addr", "127.0.0.1:0", "-metrics-addr", "127.0.0.1:0", "-policy", policy, "-work", "1ms", "-redis", ""}, extra...)
	out = exampletest.Start(t, run, args...)
	api = out.WaitFor(t, listening, 1, 10*time.Second)[1]
	metrics = out.WaitFor(t, metricsAt, 1, time.Second)[1]
	return api, metrics, policy, out
}

func get(t *testing.T, method, rawURL string, header ...string) (*http.Response, string) {
	t.Helper()
	req, err := http.NewRequest(method, rawURL, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp, string(body)
}

// burst sends n sequential searches as user and returns the status codes and
// the first 429.
func burst(t *testing.T, api, user string, n int) (codes []int, limited *http.Response, limitedBody string) {
	t.Helper()
	for range n {
		resp, body := get(t, "GET", api+"/v1/search?q=lamp", "X-User", user)
		codes = append(codes, resp.StatusCode)
		if resp.StatusCode == http.StatusTooManyRequests && limited == nil {
			limited, limitedBody = resp, body
		}
	}
	return codes, limited, limitedBody
}

func TestHTTPExample(t *testing.T) {
	api, metrics, policy, out := start(t)
	out.WaitFor(t, reloaded, 1, 5*time.Second) // the watcher applied the file

	// search-user allows bursts of 5 per user: the first 5 pass, with the
	// IETF RateLimit fields naming the binding policy, then 429s follow.
	codes, limited, body := burst(t, api, "alice", 20)
	for i, c := range codes[:5] {
		if c != http.StatusOK {
			t.Fatalf("search %d: status %d, want 200 (statuses %v)", i+1, c, codes)
		}
	}
	if limited == nil {
		t.Fatalf("20 searches in a row, none limited: %v", codes)
	}
	if got := limited.Header.Get("RateLimit-Policy"); got != `"search-user";q=5;w=1` {
		t.Errorf("RateLimit-Policy = %q", got)
	}
	if got := limited.Header.Get("RateLimit"); !regexp.MustCompile(`^"search-user";r=0;t=1$`).MatchString(got) {
		t.Errorf("RateLimit = %q", got)
	}
	if got := limited.Header.Get("Retry-After"); got != "1" {
		t.Errorf("Retry-After = %q, want 1", got)
	}
	var problem struct {
		Type     string   `json:"type"`
		Status   int      `json:"status"`
		Violated []string `json:"violated-policies"`
	}
	if err := json.Unmarshal([]byte(body), &problem); err != nil || limited.Header.Get("Content-Type") != "application/problem+json" {
		t.Fatalf("429 body %q (%s): %v", body, limited.Header.Get("Content-Type"), err)
	}
	if !strings.HasSuffix(problem.Type, "#quota-exceeded") || problem.Status != 429 || len(problem.Violated) != 1 || problem.Violated[0] != "search-user" {
		t.Errorf("429 problem = %+v", problem)
	}

	// Login hides its quota: a 429 without RateLimit fields or policy names.
	// It is keyed on the account the form submits: changing X-User on
	// every try does not help.
	for i := 1; i <= 6; i++ {
		resp, body := get(t, "POST", api+"/v1/login?user=mallory&password=wrong", "X-User", "decoy-"+strconv.Itoa(i))
		switch {
		case i <= 5 && resp.StatusCode != http.StatusUnauthorized:
			t.Fatalf("login %d: status %d, want 401", i, resp.StatusCode)
		case i == 6 && resp.StatusCode != http.StatusTooManyRequests:
			t.Fatalf("login 6: status %d, want 429", resp.StatusCode)
		case i == 6 && (resp.Header.Get("RateLimit") != "" || resp.Header.Get("RateLimit-Policy") != "" || strings.Contains(body, "login")):
			t.Errorf("hidden quota leaked: %v %s", resp.Header, body)
		}
	}

	// Hot reload: a larger burst applies without a restart; a broken edit is
	// reported with its line and the policy in force keeps deciding.
	data, err := os.ReadFile(policy)
	if err != nil {
		t.Fatal(err)
	}
	bigger := strings.Replace(string(data), "rate: 5/1s\n    burst: 5\n", "rate: 5/1s\n    burst: 50\n", 1)
	if bigger == string(data) {
		t.Fatal("policy.yaml no longer has the search-user rule this test edits")
	}
	if err := os.WriteFile(policy, []byte(bigger), 0o644); err != nil {
		t.Fatal(err)
	}
	out.WaitFor(t, reloaded, 2, 5*time.Second)
	codes, limited, _ = burst(t, api, "carol", 20)
	if limited != nil {
		t.Errorf("after raising the burst to 50, 20 searches were limited: %v", codes)
	}
	if err := os.WriteFile(policy, []byte(strings.Replace(bigger, "rate: 5/1s", "rate: 5/fortnight", 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	failed := out.WaitFor(t, regexp.MustCompile(`level=ERROR.*(line \d+)`), 1, 5*time.Second)
	t.Logf("broken policy reported: %s", failed[0])
	resp, _ := get(t, "GET", api+"/v1/search?q=lamp", "X-User", "dave")
	if got := resp.Header.Get("RateLimit-Policy"); got != `"search-user";q=50;w=1` {
		t.Errorf("after a broken edit RateLimit-Policy = %q, want the last good policy's", got)
	}

	// /healthz is never limited: 300 checks at once from one address pass,
	// without quota headers, while the same address is limited on an API
	// route by ip-safety-net (burst 100).
	for i := range 300 {
		resp, _ := get(t, "GET", api+"/healthz")
		if resp.StatusCode != http.StatusOK || resp.Header.Get("RateLimit") != "" {
			t.Fatalf("healthz %d: status %d, RateLimit %q", i+1, resp.StatusCode, resp.Header.Get("RateLimit"))
		}
	}
	var ipLimited bool
	for range 1000 {
		resp, _ := get(t, "GET", api+"/v1/items/42")
		if resp.StatusCode == http.StatusTooManyRequests {
			ipLimited = strings.HasPrefix(resp.Header.Get("RateLimit-Policy"), `"ip-safety-net"`)
			break
		}
	}
	if !ipLimited {
		t.Error("1000 item reads from one address were not limited by ip-safety-net")
	}

	// /metrics exposes the floodgate metrics (and otelhttp's).
	_, text := get(t, "GET", metrics)
	for _, want := range []string{
		`floodgate_decisions_total{floodgate_decision="limited",floodgate_policy="search-user"`,
		`floodgate_decisions_total{floodgate_decision="allowed",floodgate_policy="per-user-in-flight"`,
		`floodgate_in_flight{floodgate_stage="shedder"`,
		`floodgate_store_duration_seconds_count`,
		`http_server_request_duration_seconds_count`,
	} {
		if !strings.Contains(text, want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
}

// TestHTTPExampleRedis runs the example against a real redis-server: it says
// so at start and limits the same way; when Redis is killed, the fallback
// store keeps limiting locally.
func TestHTTPExampleRedis(t *testing.T) {
	srv := redistest.Start(t)
	api, metrics, _, out := start(t, "-redis", (&url.URL{Scheme: "redis", Host: srv.Addr()}).String())
	out.WaitFor(t, regexp.MustCompile(`store:\s+Redis at redis://`+regexp.QuoteMeta(srv.Addr())), 1, time.Second)
	codes, limited, _ := burst(t, api, "alice", 20)
	if limited == nil || limited.Header.Get("RateLimit-Policy") != `"search-user";q=5;w=1` {
		t.Fatalf("no search-user 429 against Redis: %v", codes)
	}
	n, err := srv.Client().Keys(t.Context(), "fg:*search-user*").Result()
	if err != nil || len(n) == 0 {
		t.Errorf("no search-user bucket in Redis: %v %v", n, err)
	}

	// Redis dies: the breaker opens and the rules decide locally, still
	// limiting, and the metrics say so.
	srv.Kill()
	codes, limited, _ = burst(t, api, "bob", 20)
	if limited == nil {
		t.Fatalf("no 429 with Redis down: %v", codes)
	}
	for i, c := range codes[:5] {
		if c != http.StatusOK {
			t.Errorf("search %d with Redis down: %d, want 200 from the local fallback (%v)", i+1, c, codes)
		}
	}
	_, text := get(t, "GET", metrics)
	for _, want := range []string{
		`floodgate_decisions_total{floodgate_decision="limited",floodgate_policy="search-user",floodgate_priority="read",floodgate_shadow="false",floodgate_source="local_fallback"`,
		`floodgate_fallback_breaker_transitions_total{floodgate_breaker_from="closed",floodgate_breaker_name="redis",floodgate_breaker_to="open"`,
	} {
		if !strings.Contains(text, want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
	out.WaitFor(t, regexp.MustCompile(`level=WARN msg="floodgate: store circuit breaker opened`), 1, time.Second)
}

func TestHTTPExampleBadInput(t *testing.T) {
	out := exampletest.NewOutput()
	err := run(t.Context(), []string{"-policy", "no-such-policy.yaml", "-redis", ""}, out)
	if err == nil || !strings.Contains(err.Error(), "no-such-policy.yaml") {
		t.Errorf("missing policy: err = %v", err)
	}
	err = run(t.Context(), []string{"-policy", "../policy.yaml", "-redis", "mysql://x"}, out)
	if err == nil || !strings.Contains(err.Error(), "WithRedisURL") || !strings.Contains(err.Error(), "invalid URL scheme: mysql") {
		t.Errorf("bad Redis URL: err = %v", err)
	}
}

// TestHTTPExampleSheds overloads the example with slow reads: near capacity
// the shedder answers reads 503 with Retry-After, while critical payments sent
// at the same moment are never shed.
func TestHTTPExampleSheds(t *testing.T) {
	api, _, _, _ := start(t, "-work", "500ms")
	const reads, payments = 80, 10 // under ip-safety-net's burst of 100
	type result struct {
		critical bool
		code     int
		retry    string
		problem  string
	}
	results := make(chan result, reads+payments)
	var wg sync.WaitGroup
	for i := range reads + payments {
		critical := i%9 == 0 && i/9 < payments
		wg.Go(func() {
			method, path := "GET", "/v1/items/"+strconv.Itoa(i)
			if critical {
				method, path = "POST", "/v1/payments"
			}
			req, err := http.NewRequest(method, api+path, nil)
			if err != nil {
				t.Error(err)
				return
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Error(err)
				return
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			results <- result{critical, resp.StatusCode, resp.Header.Get("Retry-After"), string(body)}
		})
	}
	wg.Wait()
	close(results)
	var shed, readsOK, paid int
	for r := range results {
		switch {
		case r.critical && r.code == http.StatusCreated:
			paid++
		case r.critical:
			t.Errorf("critical payment got %d: %s", r.code, r.problem)
		case r.code == http.StatusOK:
			readsOK++
		case r.code == http.StatusServiceUnavailable:
			shed++
			if r.retry != "1" || !strings.Contains(r.problem, "#temporary-reduced-capacity") {
				t.Errorf("shed read: Retry-After %q, body %s", r.retry, r.problem)
			}
		default:
			t.Errorf("read got %d: %s", r.code, r.problem)
		}
	}
	t.Logf("%d reads served, %d shed; %d of %d payments served", readsOK, shed, paid, payments)
	if shed == 0 {
		t.Errorf("%d concurrent slow reads against a shedder of capacity 64: none shed", reads)
	}
}

// TestHTTPExampleTrace checks -trace: the server span of a limited request
// carries the floodgate.* attributes of the denying decision.
func TestHTTPExampleTrace(t *testing.T) {
	api, _, _, out := start(t, "-trace")
	if _, limited, _ := burst(t, api, "alice", 20); limited == nil {
		t.Fatal("20 searches in a row, none limited")
	}
	out.WaitFor(t, regexp.MustCompile(`"Key":"floodgate.decision","Value":\{"Type":"STRING","Value":"limited"\}.*`+
		`"Key":"floodgate.policy","Value":\{"Type":"STRING","Value":"search-user"\}.*`+
		`"Key":"http.response.status_code","Value":\{"Type":"INT64","Value":429\}`), 1, 5*time.Second)
}
