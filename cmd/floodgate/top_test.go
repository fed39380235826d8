package main

import (
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate/internal/demo"
)

// topRows runs top with args against ctx and returns its rows by rule,
// each row's principal, denied and error columns, in the printed order.
func topRows(t *testing.T, ctx context.Context, args ...string) (map[string][][3]string, []string) {
	t.Helper()
	var out, errOut bytes.Buffer
	if code := top(ctx, args, &out, &errOut); code != 0 {
		t.Fatalf("floodgate top %s: exit %d\n%s%s", strings.Join(args, " "), code, out.String(), errOut.String())
	}
	t.Logf("floodgate top %s:\n%s", strings.Join(args, " "), out.String())
	lines := strings.Split(strings.TrimRight(out.String(), "\n"), "\n")
	if len(lines) < 2 || !strings.HasPrefix(lines[0], "denials over the last ") || !strings.HasPrefix(lines[1], "RULE ") {
		t.Fatalf("top printed no table:\n%s", out.String())
	}
	rows := map[string][][3]string{}
	var order []string
	cols := regexp.MustCompile(`\s{2,}`)
	for _, l := range lines[2:] {
		c := cols.Split(l, -1)
		if len(c) != 5 {
			t.Fatalf("row %q has %d columns, want 5", l, len(c))
		}
		if rows[c[0]] == nil {
			order = append(order, c[0])
		}
		rows[c[0]] = append(rows[c[0]], [3]string{c[1], c[2], c[3]})
	}
	return rows, order
}

// TestTopNamesTheAttackers: `floodgate top` against the demo's services
// names the scraper's address first among those the per-address rule
// denied and the brute-forced user first among the login rule's, with
// the demo's tenants' traffic beside them. Bounded in count (the
// demo's own generators, a fixed number of requests each: 520 of the
// tenants', 40 login attempts, 600 scraper requests) and in time (a
// minute for everything, 10 s per request).
//
// The brute force is exact: sent first, 40 attempts at a rule of 5 a
// minute keyed on [ip, user] are 35 denials of "ip=203.0.113.66 user=admin" (the
// rule hides its quota, so it binds every denial it makes, and a denied
// attempt charges no rule). The scraper's count depends on the pace
// (the address rule of 100/s, burst 100, denies while the scraper's
// first hundred are admitted in under half a second, before the tenant's
// plan binds): only its place is asserted.
func TestTopNamesTheAttackers(t *testing.T) {
	if testing.Short() {
		t.Skip("drives 1160 requests at the demo's services")
	}
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	svc, err := demo.Serve(ctx, demo.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer svc.Close()

	var scraper, bruteForce demo.Generator
	var tenants []demo.Generator
	for _, g := range demo.Scenario(demo.DefaultDuration) {
		switch {
		case g.Event == "scraper":
			scraper = g
		case g.Event == "brute-force":
			bruteForce = g
		case g.Event == "" && g.Scenario == "":
			tenants = append(tenants, g)
		}
	}
	if scraper.Route == "" || bruteForce.Route == "" || len(tenants) == 0 {
		t.Fatal("the demo's scenario has no scraper, brute force or tenants")
	}
	// The brute force first, while its tenant (tinyco, on the free plan)
	// has its plan's burst: every attempt is then decided by the login
	// rule alone.
	if got := svc.Send(ctx, bruteForce, 40, 2); got[demo.Limited] != 35 {
		t.Fatalf("brute force: outcomes %v, want 35 limited", got)
	}
	// The tenants' ordinary traffic, one request at a time per
	// generator (so that the shedder, at 40 in flight, stays out of it).
	var wg sync.WaitGroup
	for _, g := range tenants {
		wg.Go(func() { svc.Send(ctx, g, 20, 1) })
	}
	wg.Wait()
	if got := svc.Send(ctx, scraper, 600, 24); got[demo.Limited] == 0 {
		t.Fatalf("scraper: outcomes %v, want some limited", got)
	}
	if ctx.Err() != nil {
		t.Fatal("the traffic took more than a minute")
	}

	rows, order := topRows(t, ctx, "-url", svc.TopURL, "-n", "3")
	if ip := rows["ip-safety-net"]; len(ip) == 0 || ip[0][0] != "ip=203.0.113.7" {
		t.Errorf("ip-safety-net's rows %v: want the scraper's address, ip=203.0.113.7, first", ip)
	}
	if login := rows["login-ip-user"]; len(login) != 1 || login[0] != [3]string{"ip=203.0.113.66 user=admin", "35", "±0"} {
		t.Errorf("login-ip-user's rows %v: want ip=203.0.113.66 user=admin denied 35 (±0), alone", login)
	}
	if len(order) < 2 {
		t.Errorf("rules %v: want the login and address rules at least", order)
	}

	// One rule, one row.
	rows, order = topRows(t, ctx, "-url", svc.TopURL, "-rule", "ip-safety-net", "-n", "1")
	if len(order) != 1 || len(rows["ip-safety-net"]) != 1 || rows["ip-safety-net"][0][0] != "ip=203.0.113.7" {
		t.Errorf("-rule ip-safety-net -n 1: %v, want one row, ip=203.0.113.7", rows)
	}
}

func TestTopUsage(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args []string
		want string
	}{
		{nil, "floodgate top: -url is required"},
		{[]string{"-url", "localhost:8080/top"}, `floodgate top: -url "localhost:8080/top" is not an http:// or https:// URL with a host`},
		{[]string{"-url", "http://127.0.0.1:1/top", "-n", "0"}, "floodgate top: -n 0 must be from 1 to 64"},
		{[]string{"-url", "http://127.0.0.1:1/top", "-n", "65"}, "floodgate top: -n 65 must be from 1 to 64"},
		{[]string{"-url", "http://127.0.0.1:1/top", "-watch", "10ms"}, "floodgate top: -watch 10ms must be 0 (read once) or at least 100ms"},
		{[]string{"-url", "http://127.0.0.1:1/top", "extra"}, `floodgate top: unexpected argument "extra"`},
	} {
		var out, errOut bytes.Buffer
		if code := run(append([]string{"top"}, tc.args...), &out, &errOut); code != 2 || !strings.Contains(errOut.String(), tc.want) {
			t.Errorf("top %v: exit %d, %q; want 2, %q", tc.args, code, errOut.String(), tc.want)
		}
	}
	var out, errOut bytes.Buffer
	if code := run([]string{"top", "-h"}, &out, &errOut); code != 0 || !strings.Contains(errOut.String(), "usage: floodgate top -url") {
		t.Errorf("top -h: exit %d, %q", code, errOut.String())
	}
}

// TestTopEndpointErrors: an endpoint's error, or a reply that is not a
// denial endpoint's, is exit 1 naming it.
func TestTopEndpointErrors(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/bad" {
			http.Error(w, `guard: top denied: "nope" is no rule of the policy in force`, http.StatusBadRequest)
			return
		}
		if r.URL.Query().Get("n") != "10" {
			http.Error(w, "n not sent", http.StatusBadRequest)
			return
		}
		w.Write([]byte("<html>"))
	}))
	defer srv.Close()
	for path, want := range map[string]string{
		"/bad":  `400 Bad Request: guard: top denied: "nope" is no rule of the policy in force`,
		"/html": "not a denial endpoint's reply",
	} {
		var out, errOut bytes.Buffer
		if code := top(context.Background(), []string{"-url", srv.URL + path}, &out, &errOut); code != 1 || !strings.Contains(errOut.String(), want) {
			t.Errorf("%s: exit %d, %q; want 1, %q", path, code, errOut.String(), want)
		}
	}
}

// TestTopWatch: -watch reads again until its context ends, and a table
// says so when nothing is denied.
func TestTopWatch(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	reads := 0
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		reads++
		if reads == 4 {
			cancel() // this read's table may print or not
		}
		mu.Unlock()
		w.Write([]byte(`{"interval_seconds":60,"covered_seconds":51.2,"rules":[],"top":[],"dropped":0}`))
	}))
	defer srv.Close()
	var out, errOut bytes.Buffer
	if code := top(ctx, []string{"-url", srv.URL, "-watch", "100ms"}, &out, &errOut); code != 0 {
		t.Fatalf("exit %d: %s", code, errOut.String())
	}
	if got := strings.Count(out.String(), "denials over the last 51s (interval 1m0s)\nno denials\n"); got < 3 || got > 4 {
		t.Errorf("%d tables, want 3 or 4:\n%s", got, out.String())
	}
}
