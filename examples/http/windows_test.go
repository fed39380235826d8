package main

import (
	"encoding/json"
	"net/http"
	"regexp"
	"testing"
	"time"
)

// TestHTTPExampleWindows: the free plan of policy.yaml has a minute and a
// day window. Every response lists both in RateLimit-Policy and RateLimit,
// the binding (minute) one first; the 11th request of a free tenant is
// denied by the minute window, which the problem body names, and the day
// window is not charged for it.
func TestHTTPExampleWindows(t *testing.T) {
	api, _, _, out := start(t)
	out.WaitFor(t, reloaded, 1, 5*time.Second)
	const policy = `"tenant-plan/1m";q=10;w=60, "tenant-plan/24h";q=1000;w=86400`
	var (
		limited *http.Response
		body    string
		n       int
	)
	for n = 1; n <= 20 && limited == nil; n++ {
		resp, b := get(t, "GET", api+"/v1/items/42", "X-Tenant", "t-free", "X-Tier", "free")
		if got := resp.Header.Get("RateLimit-Policy"); got != policy {
			t.Fatalf("request %d: RateLimit-Policy = %q, want %q", n, got, policy)
		}
		if n == 1 {
			if got := resp.Header.Get("RateLimit"); !regexp.MustCompile(`^"tenant-plan/1m";r=9;t=1, "tenant-plan/24h";r=999;t=\d+$`).MatchString(got) {
				t.Errorf("first: RateLimit = %q", got)
			}
		}
		if resp.StatusCode == http.StatusTooManyRequests {
			limited, body = resp, b
		}
	}
	// 60/1m refills one a second: the burst of 10 passes, and the 11th
	// (or, on a slow machine, a later one) is denied.
	if limited == nil || n-1 < 11 {
		t.Fatalf("no 429 in 20 requests, or one too early (%d)", n-1)
	}
	if got := limited.Header.Get("RateLimit"); !regexp.MustCompile(`^"tenant-plan/1m";r=0;t=1, "tenant-plan/24h";r=9[89]\d;t=\d+$`).MatchString(got) {
		t.Errorf("429: RateLimit = %q", got)
	}
	var problem struct {
		Violated []string `json:"violated-policies"`
	}
	if err := json.Unmarshal([]byte(body), &problem); err != nil || len(problem.Violated) != 1 || problem.Violated[0] != "tenant-plan/1m" {
		t.Errorf("429 body %s: violated %q (%v)", body, problem.Violated, err)
	}
	// The pro plan of another tenant has its own windows.
	resp, _ := get(t, "GET", api+"/v1/items/42", "X-Tenant", "t-pro", "X-Tier", "pro")
	if got := resp.Header.Get("RateLimit-Policy"); got != `"tenant-plan/1m";q=50;w=60, "tenant-plan/24h";q=50000;w=86400` {
		t.Errorf("pro: RateLimit-Policy = %q", got)
	}
}
