package redistest

import (
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/redis/go-redis/v9"
)

// SharedCluster is one Redis Cluster (ClusterSize masters, no replicas)
// that the tests of a test binary share: the first test that asks for it
// starts it, the others use it as it is, and Run stops it once every test
// has ended. A cluster takes about 2 s to form (Redis keeps a new master
// out of service for the first 2 s of its life), which tests that only
// take and read their own keys need not pay each.
//
// Only a test that never changes the cluster itself may share it: no
// fault (kill, pause, restart), no FLUSHALL or SCRIPT FLUSH, no CONFIG
// SET, no slot moved, nothing that counts what another client sends. And
// it keeps to keys of its own (under Prefix), so that no test sees
// another's state and tests sharing it may run in parallel. A test that
// needs any of the rest starts a cluster of its own (StartCluster).
//
// The zero value is ready to use. TestMain runs the binary's tests
// through Run:
//
//	var cluster redistest.SharedCluster
//
//	func TestMain(m *testing.M) { os.Exit(cluster.Run(m)) }
type SharedCluster struct {
	mu       sync.Mutex
	running  bool // inside Run
	c        *Cluster
	err      error // why the cluster could not start
	prefixes int
}

// Run runs the tests (m.Run) and then stops the cluster, if a test
// started it, and returns m.Run's exit code.
func (s *SharedCluster) Run(m *testing.M) int {
	s.mu.Lock()
	s.running = true
	s.mu.Unlock()
	defer s.stop()
	return m.Run()
}

// stop kills and reaps the cluster's nodes and removes their directories;
// a cluster asked for after it is started again.
func (s *SharedCluster) stop() {
	s.mu.Lock()
	c := s.c
	s.c, s.err, s.running = nil, nil, false
	s.mu.Unlock()
	if c != nil {
		c.stop()
	}
}

// cluster returns the cluster, started on first use; it fails t when it
// cannot start, or when s is used outside Run (nothing would stop it).
func (s *SharedCluster) cluster(t testing.TB) *Cluster {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.running {
		t.Fatalf("redistest: a SharedCluster used outside its Run, which stops it: run the tests from TestMain, os.Exit(cluster.Run(m))")
	}
	if s.c == nil && s.err == nil {
		s.c, s.err = startUnowned(false, nil)
	}
	if s.err != nil {
		t.Fatalf("shared cluster: %v", s.err)
	}
	return s.c
}

// Addrs returns the masters' addresses, "127.0.0.1:port" each, starting
// the cluster if no test has yet.
func (s *SharedCluster) Addrs(t testing.TB) []string {
	t.Helper()
	return s.cluster(t).Addrs()
}

// Client returns a new go-redis cluster client of the shared cluster
// (starting it if no test has yet), set up as Cluster.Client's are and
// closed when t ends.
func (s *SharedCluster) Client(t testing.TB) *redis.ClusterClient {
	t.Helper()
	c := s.cluster(t)
	cl := redis.NewClusterClient(&redis.ClusterOptions{
		Addrs:        c.Addrs(),
		DialTimeout:  c.cfg.dialTimeout,
		ReadTimeout:  c.cfg.ioTimeout,
		WriteTimeout: c.cfg.ioTimeout,
		MaxRedirects: 3,
		// Honour the context's deadline, as redisstore requires.
		ContextTimeoutEnabled: true,
	})
	t.Cleanup(func() { _ = cl.Close() })
	return cl
}

// Prefix returns a key prefix no other call returns: t's name (braces,
// which would change a key's hash tag, and spaces made '(', ')' and
// '_') and a number, then ':'. A test that puts it before each of its
// keys (redisstore.WithPrefix does) keeps to keys of its own.
func (s *SharedCluster) Prefix(t testing.TB) string {
	s.mu.Lock()
	s.prefixes++
	n := s.prefixes
	s.mu.Unlock()
	name := strings.NewReplacer("{", "(", "}", ")", " ", "_").Replace(t.Name())
	return fmt.Sprintf("%s#%d:", name, n)
}
