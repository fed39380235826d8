package main

import (
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
)

// With -adaptive, 80 slow reads and 10 payments at once: the shedder's
// capacity starts at 8 and cannot have learnt much in half a second, so
// most reads are shed (503) or refused by the adaptive in-flight limit
// (429), while every payment (critical: never shed, and the adaptive
// limit bypasses it) is served.
func TestHTTPExampleAdaptive(t *testing.T) {
	api, _, _, out := start(t, "-work", "500ms", "-adaptive")
	const reads, payments = 80, 10
	type result struct {
		critical bool
		code     int
		body     string
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
			results <- result{critical, resp.StatusCode, string(body)}
		})
	}
	wg.Wait()
	close(results)
	var refused, readsOK, paid int
	for r := range results {
		switch {
		case r.critical && r.code == http.StatusCreated:
			paid++
		case r.critical:
			t.Errorf("critical payment got %d: %s", r.code, r.body)
		case r.code == http.StatusOK:
			readsOK++
		case r.code == http.StatusServiceUnavailable || r.code == http.StatusTooManyRequests:
			refused++
		default:
			t.Errorf("read got %d: %s", r.code, r.body)
		}
	}
	t.Logf("%d reads served, %d refused; %d of %d payments served", readsOK, refused, paid, payments)
	if refused == 0 || readsOK == 0 {
		t.Errorf("reads: %d served, %d refused; want both", readsOK, refused)
	}
	if !strings.Contains(out.String(), "adaptive shedder") {
		t.Errorf("no startup line about the adaptive shedder's CPU signal:\n%s", out.String())
	}
}
