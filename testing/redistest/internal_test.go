package redistest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"testing"
	"time"
)

// TestPortClashIsDetected: launching on a port someone else holds is
// reported as errPortClash (so startFresh retries on another port), not as
// a hang or a generic failure.
func TestPortClashIsDetected(t *testing.T) {
	t.Parallel()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	port := l.Addr().(*net.TCPAddr).Port
	s := newServer(t, defaultConfig(), false)
	dir := t.TempDir()
	err = s.launch(port, dir)
	if !errors.Is(err, errPortClash) {
		t.Fatalf("launch on a taken port: %v, want errPortClash", err)
	}
	if s.Running() {
		t.Fatal("a failed launch left a process behind")
	}
	_ = os.RemoveAll(dir)
}

func TestMissingBinaryNamesMakeDeps(t *testing.T) {
	t.Setenv("PATH", t.TempDir())
	ft := &fatalRecorder{TB: t}
	func() {
		defer func() { _ = recover() }()
		lookBinary(ft, "redis-server")
	}()
	if want := "make deps"; !contains(ft.msg, want) {
		t.Fatalf("message %q does not name %q", ft.msg, want)
	}
}

// fatalRecorder captures Fatalf instead of failing the test, and stops
// the caller with a panic as Fatalf would with Goexit.
type fatalRecorder struct {
	testing.TB
	msg string
}

func (f *fatalRecorder) Helper() {}
func (f *fatalRecorder) Fatalf(format string, args ...any) {
	f.msg = sprintf(format, args...)
	panic("fatal")
}

func contains(s, sub string) bool { return strings.Contains(s, sub) }

func sprintf(format string, args ...any) string { return fmt.Sprintf(format, args...) }

// TestBadOptions: every bad option is reported, before any process starts.
func TestBadOptions(t *testing.T) {
	t.Parallel()
	_, err := newConfig([]Option{WithStartTimeout(0), nil, WithClientTimeouts(time.Second, -1), WithArgs("--x")})
	want := "redistest: WithStartTimeout: 0s must be > 0\nredistest: nil Option\nredistest: WithClientTimeouts: dial 1s and io -1ns must be > 0"
	if err == nil || err.Error() != want {
		t.Fatalf("newConfig error = %v, want %q", err, want)
	}
	if cfg, err := newConfig([]Option{WithStartTimeout(time.Second), WithClientTimeouts(time.Second, time.Second)}); err != nil || cfg.startTimeout != time.Second {
		t.Fatalf("good options: %+v, %v", cfg, err)
	}
}

// TestSharedCluster: the tests of a binary that ask a SharedCluster get
// one cluster, started by the first of them and the same for the
// others: a key one client writes, another reads, and prefixes are never
// the same twice; stopping it (what Run does once the tests end) leaves
// no node answering. Outside Run it fails the test instead of starting a
// cluster nothing would stop.
func TestSharedCluster(t *testing.T) {
	t.Parallel()
	var s SharedCluster
	ft := &fatalRecorder{TB: t}
	func() {
		defer func() { _ = recover() }()
		s.Client(ft)
	}()
	if want := "outside its Run"; !contains(ft.msg, want) {
		t.Fatalf("a SharedCluster used outside Run: message %q, want one saying %q", ft.msg, want)
	}
	if s.c != nil {
		t.Fatal("a SharedCluster used outside Run started a cluster")
	}

	s.running = true // as Run does
	defer s.stop()
	a, b := s.Client(t), s.Client(t)
	addrs := s.Addrs(t)
	if len(addrs) != ClusterSize {
		t.Fatalf("%d addrs, want %d", len(addrs), ClusterSize)
	}
	ctx := context.Background()
	pa, pb := s.Prefix(t), s.Prefix(t)
	if pa == pb || strings.ContainsAny(pa+pb, "{} ") {
		t.Fatalf("prefixes %q and %q: want two different ones without braces or spaces", pa, pb)
	}
	if err := a.Set(ctx, pa+"{k}", "v", 0).Err(); err != nil {
		t.Fatal(err)
	}
	if got, err := b.Get(ctx, pa+"{k}").Result(); err != nil || got != "v" {
		t.Fatalf("GET through a second client = %q, %v; want the first client's write", got, err)
	}
	if again := s.Addrs(t); fmt.Sprint(again) != fmt.Sprint(addrs) {
		t.Fatalf("second use got the cluster at %v, the first at %v", again, addrs)
	}
	s.stop()
	for _, addr := range addrs {
		if ping(addr) == nil {
			t.Errorf("%s answers PING after the shared cluster stopped", addr)
		}
	}
}
