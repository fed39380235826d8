package main

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
)

// TestHTTPExampleTopDenied: the admin listener serves who is denied
// (guard.Guard.TopDeniedHandler, what `floodgate top -url` reads): a
// user's burst of searches names that user first under search-user,
// counted exactly.
func TestHTTPExampleTopDenied(t *testing.T) {
	api, metrics, _, _ := start(t)
	codes, _, _ := burst(t, api, "alice", 12)
	burst(t, api, "bob", 7)
	denied := 0
	for _, c := range codes {
		if c == http.StatusTooManyRequests {
			denied++
		}
	}
	if denied == 0 {
		t.Fatalf("12 searches in a row, none limited: %v", codes)
	}
	resp, body := get(t, "GET", strings.TrimSuffix(metrics, "/metrics")+"/debug/floodgate/top?rule=search-user&n=1")
	var reply struct {
		Top []struct {
			Rule, Principal string
			Denied          int `json:"denied"`
		}
	}
	if err := json.Unmarshal([]byte(body), &reply); err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("top: %d %q: %v", resp.StatusCode, body, err)
	}
	if len(reply.Top) != 1 || reply.Top[0].Rule != "search-user" || reply.Top[0].Principal != "user=alice" || reply.Top[0].Denied != denied {
		t.Errorf("top = %+v, want search-user user=alice denied %d, alone (n=1)", reply.Top, denied)
	}
}
