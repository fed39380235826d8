package main

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate/bench/internal/child"
	"github.com/floodgate-go/floodgate/policyfile"
)

// TestMain lets the test binary be a client process: runMode starts
// os.Executable() with serveFlag, which here is this binary.
func TestMain(m *testing.M) {
	child.ServeIfAsked(serveFlag, serve)
	m.Run()
}

// Every bad flag is named.
func TestBadFlags(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"-procs", "0"}, "-procs 0"},
		{[]string{"-modes", "guard,magic"}, `unknown mode "magic"`},
		{[]string{"-offered", "-1"}, "-offered -1"},
		{[]string{"-rule-rate", "2.5"}, "-rule-rate 2.5"},
		{[]string{"-vendor-burst", "0"}, "-vendor-burst 0"},
		{[]string{"-dur", "10ms"}, "-dur 10ms"},
		{[]string{"-on-store-error", "maybe"}, `-on-store-error "maybe"`},
		{[]string{"-sync", "0s"}, "-sync 0s"},
		{[]string{"extra"}, "unexpected arguments"},
	} {
		_, err := parseFlags(append([]string{"vendor"}, tc.args...), io.Discard)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: %v, want an error naming %q", tc.args, err, tc.want)
		}
	}
	if _, err := parseFlags([]string{"vendor"}, io.Discard); err != nil {
		t.Fatalf("defaults: %v", err)
	}
}

// Each mode's policy loads, and only the guard mode has the rule.
func TestPolicies(t *testing.T) {
	t.Parallel()
	cfg, _ := parseFlags([]string{"vendor", "-max-wait", "200ms"}, io.Discard)
	for _, mode := range modes {
		f, err := policyfile.Load([]byte(policy(cfg, mode)))
		if err != nil {
			t.Fatalf("%s: %v\n%s", mode, err, policy(cfg, mode))
		}
		if rules := len(f.OutboundLimits().Rules); rules != map[string]int{"guard": 1}[mode] {
			t.Errorf("%s: %d outbound rules", mode, rules)
		}
		if f.CooldownSync != 100*time.Millisecond {
			t.Errorf("%s: sync %v", mode, f.CooldownSync)
		}
	}
}

// The vendor admits its burst and answers the next call 429 with the whole
// seconds until its next token.
func TestVendorBucket(t *testing.T) {
	t.Parallel()
	v := newVendor(0.25, 3) // a token every 4 s
	v.start = time.Now()
	srv := httptest.NewServer(v)
	defer srv.Close()
	var codes []int
	var retry string
	for range 4 {
		resp, err := http.Get(srv.URL)
		if err != nil {
			t.Fatal(err)
		}
		_ = resp.Body.Close()
		codes = append(codes, resp.StatusCode)
		retry = resp.Header.Get("Retry-After")
	}
	if codes[0] != 200 || codes[2] != 200 || codes[3] != 429 || retry != "4" {
		t.Fatalf("codes %v, Retry-After %q; want 3 accepted, then 429 with 4", codes, retry)
	}
	if a, r, m := v.totals(); a != 3 || r != 1 || m != 4 {
		t.Fatalf("totals %d accepted, %d refused, %d in the busiest second", a, r, m)
	}
}
