package main

import (
	"bytes"
	"strings"
	"testing"

	"github.com/floodgate-go/floodgate/testing/redistest"
)

// runRecover runs the command and turns a panic into a test failure.
func runRecover(t *testing.T, args []string) (code int, stdout, stderr string, panicked any) {
	t.Helper()
	var out, errOut bytes.Buffer
	func() {
		defer func() { panicked = recover() }()
		code = run(args, &out, &errOut)
	}()
	return code, out.String(), errOut.String(), panicked
}

// TestDemoRedisURLNegativePoolSize: a REDIS_URL go-redis parses but
// cannot build a client from (a negative pool_size) is a clear error, not
// a panic of the command (makechan: size out of range).
func TestDemoRedisURLNegativePoolSize(t *testing.T) {
	srv := redistest.Start(t)
	for _, u := range []string{
		"redis://" + srv.Addr() + "?pool_size=-5",
		"redis+cluster://" + srv.Addr() + "?pool_size=-5",
		"redis+sentinel://" + srv.Addr() + "?master_name=m&pool_size=-5",
	} {
		t.Setenv("REDIS_URL", u)
		code, _, stderr, p := runRecover(t, []string{"demo", "-duration", "1s", "-report", "", "-compare", "off"})
		if p != nil {
			t.Errorf("floodgate demo with REDIS_URL=%s panicked: %v", u, p)
			continue
		}
		if code == 0 || !strings.Contains(stderr, "pool_size") {
			t.Errorf("REDIS_URL=%s: exit %d, stderr %q: want a non-zero exit naming pool_size", u, code, stderr)
		}
	}
}

// TestDemoRedisURLPasswordNotPrinted: the demo prints where it keeps
// state; it must not print the password of REDIS_URL, on stdout or in an
// error (it printed both).
func TestDemoRedisURLPasswordNotPrinted(t *testing.T) {
	srv := redistest.Start(t)
	for _, u := range []string{
		"redis://user:s3cret@" + srv.Addr() + "/notadb", // banner, then a parse error
		"redis://user:s3cret@bad host:1",                // net/url's error quotes the URL
	} {
		t.Setenv("REDIS_URL", u)
		code, stdout, stderr, p := runRecover(t, []string{"demo", "-duration", "1s", "-report", "", "-compare", "off"})
		if p != nil {
			t.Fatalf("%q: panic %v", u, p)
		}
		if strings.Contains(stdout+stderr, "s3cret") {
			t.Errorf("REDIS_URL=%q: exit %d, the password is printed:\nstdout: %q\nstderr: %q", u, code, stdout, stderr)
		}
	}
}

// TestDemoBadRedisURLIsUsageError: a malformed -redis / REDIS_URL is
// a usage error like a malformed -redis-fault (TestDemoFlags): exit 2,
// before anything starts (nothing on stdout).
func TestDemoBadRedisURLIsUsageError(t *testing.T) {
	t.Setenv("REDIS_URL", "")
	for _, u := range []string{"http://127.0.0.1:1", "not a url", "redis+sentinel://127.0.0.1:1"} {
		code, stdout, stderr, p := runRecover(t, []string{"demo", "-duration", "1s", "-report", "", "-compare", "off", "-redis", u})
		if p != nil {
			t.Fatalf("%q: panic %v", u, p)
		}
		if code != 2 || stdout != "" {
			t.Errorf("-redis %q: exit %d, stdout %q, stderr %q; want exit 2 and nothing started", u, code, stdout, stderr)
		}
	}
}

// TestDemoDurationZeroRefused: -duration 0 is not a run length and is
// refused, as -duration 500ms is (it was taken silently as the 20s
// default).
func TestDemoDurationZeroRefused(t *testing.T) {
	t.Setenv("REDIS_URL", "")
	code, stdout, stderr, p := runRecover(t, []string{"demo", "-duration", "0", "-redis-fault", "kill@25s"})
	if p != nil {
		t.Fatal(p)
	}
	if code != 2 || stdout != "" || strings.Contains(stderr, "20s run") || !strings.Contains(stderr, "duration") {
		t.Errorf("demo -duration 0: exit %d, stderr %q; want exit 2 naming -duration 0 as invalid, not a 20s run", code, stderr)
	}
}
