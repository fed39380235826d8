package redistest_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate/testing/redistest"
)

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func TestStartSetGet(t *testing.T) {
	t.Parallel()
	s := redistest.Start(t)
	if s.Port() == 6379 {
		t.Fatalf("got the system Redis port 6379")
	}
	if want := "127.0.0.1:" + strconv.Itoa(s.Port()); s.Addr() != want {
		t.Fatalf("Addr() = %q, want %q", s.Addr(), want)
	}
	ctx := ctxT(t)
	c := s.Client()
	if err := c.Set(ctx, "k", "v", 0).Err(); err != nil {
		t.Fatal(err)
	}
	if got, err := c.Get(ctx, "k").Result(); err != nil || got != "v" {
		t.Fatalf("GET k = %q, %v", got, err)
	}
	// No persistence configured.
	cfg, err := c.ConfigGet(ctx, "save").Result()
	if err != nil {
		t.Fatal(err)
	}
	if cfg["save"] != "" {
		t.Fatalf("save = %q, want empty", cfg["save"])
	}
	cfg, err = c.ConfigGet(ctx, "appendonly").Result()
	if err != nil {
		t.Fatal(err)
	}
	if cfg["appendonly"] != "no" {
		t.Fatalf("appendonly = %q, want no", cfg["appendonly"])
	}
}

func TestTwoServersAreIndependent(t *testing.T) {
	t.Parallel()
	a, b := redistest.Start(t), redistest.Start(t)
	if a.Port() == b.Port() {
		t.Fatalf("both servers on port %d", a.Port())
	}
	ctx := ctxT(t)
	if err := a.Client().Set(ctx, "k", "a", 0).Err(); err != nil {
		t.Fatal(err)
	}
	if n, err := b.Client().Exists(ctx, "k").Result(); err != nil || n != 0 {
		t.Fatalf("EXISTS k on b = %d, %v; want 0", n, err)
	}
}

func TestKillAndRestartOnSamePort(t *testing.T) {
	t.Parallel()
	s := redistest.Start(t)
	ctx := ctxT(t)
	c := s.Client()
	port := s.Port()
	if err := c.Set(ctx, "k", "v", 0).Err(); err != nil {
		t.Fatal(err)
	}
	sha, err := c.ScriptLoad(ctx, "return 1").Result()
	if err != nil {
		t.Fatal(err)
	}

	s.Kill()
	if s.Running() {
		t.Fatal("Running() after Kill")
	}
	if err := c.Ping(ctx).Err(); err == nil {
		t.Fatal("PING succeeded against a killed server")
	}

	s.Restart()
	if s.Port() != port {
		t.Fatalf("port after restart = %d, want %d", s.Port(), port)
	}
	if !s.Running() {
		t.Fatal("not Running() after Restart")
	}
	// The same client reconnects; data and the script cache are gone.
	var pingErr error
	for i := 0; i < 3; i++ { // the first command may hit a dead pooled conn
		if pingErr = c.Ping(ctx).Err(); pingErr == nil {
			break
		}
	}
	if pingErr != nil {
		t.Fatalf("PING after restart: %v", pingErr)
	}
	if n, err := c.Exists(ctx, "k").Result(); err != nil || n != 0 {
		t.Fatalf("EXISTS k after restart = %d, %v; want 0", n, err)
	}
	exists, err := c.ScriptExists(ctx, sha).Result()
	if err != nil {
		t.Fatal(err)
	}
	if exists[0] {
		t.Fatal("script cache survived restart")
	}
}

// TestPauseResume: a paused server answers nothing, and a client set up
// with WithClientTimeouts gives up on it by its read timeout (an i/o
// timeout, not a hang); once resumed it answers again. That the client
// carries the timeouts is read from its options, not timed: go-redis's
// default read timeout (3 s) would also end the PING, only later.
func TestPauseResume(t *testing.T) {
	t.Parallel()
	s := redistest.Start(t, redistest.WithClientTimeouts(200*time.Millisecond, 300*time.Millisecond))
	ctx := ctxT(t)
	c := s.Client()
	if o := c.Options(); o.DialTimeout != 200*time.Millisecond || o.ReadTimeout != 300*time.Millisecond || o.WriteTimeout != 300*time.Millisecond {
		t.Fatalf("client timeouts: dial %s, read %s, write %s; want 200ms, 300ms, 300ms", o.DialTimeout, o.ReadTimeout, o.WriteTimeout)
	}
	if err := c.Ping(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	s.Pause()
	err := c.Ping(ctx).Err()
	var nerr net.Error
	if !errors.As(err, &nerr) || !nerr.Timeout() {
		t.Fatalf("PING against a paused server: %v, want an i/o timeout", err)
	}
	s.Resume()
	var pingErr error
	for i := 0; i < 5; i++ {
		if pingErr = c.Ping(ctx).Err(); pingErr == nil {
			break
		}
	}
	if pingErr != nil {
		t.Fatalf("PING after Resume: %v", pingErr)
	}
}

func TestScriptFlushAndFlushAll(t *testing.T) {
	t.Parallel()
	s := redistest.Start(t)
	ctx := ctxT(t)
	c := s.Client()
	sha, err := c.ScriptLoad(ctx, "return 1").Result()
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Set(ctx, "k", "v", 0).Err(); err != nil {
		t.Fatal(err)
	}
	s.ScriptFlush()
	s.FlushAll()
	if err := c.EvalSha(ctx, sha, nil).Err(); err == nil || !strings.HasPrefix(err.Error(), "NOSCRIPT") {
		t.Fatalf("EVALSHA after SCRIPT FLUSH: %v, want NOSCRIPT", err)
	}
	if n, _ := c.DBSize(ctx).Result(); n != 0 {
		t.Fatalf("DBSIZE after FLUSHALL = %d", n)
	}
}

// TestNoLeakedProcess checks that the cleanup reaps the process: after the
// subtest ends, its pid no longer exists.
func TestNoLeakedProcess(t *testing.T) {
	t.Parallel()
	var pid int
	t.Run("inner", func(t *testing.T) {
		s := redistest.Start(t)
		ctx := ctxT(t)
		info, err := s.Client().Info(ctx, "server").Result()
		if err != nil {
			t.Fatal(err)
		}
		for _, line := range strings.Split(info, "\r\n") {
			if v, ok := strings.CutPrefix(line, "process_id:"); ok {
				pid, _ = strconv.Atoi(v)
			}
		}
		if pid == 0 {
			t.Fatalf("no process_id in INFO server")
		}
	})
	p, err := os.FindProcess(pid)
	if err != nil {
		return
	}
	if err := p.Signal(syscall.Signal(0)); err == nil {
		t.Fatalf("redis-server pid %d still alive after its test ended", pid)
	}
}

func TestCluster(t *testing.T) {
	t.Parallel()
	cl := redistest.StartCluster(t)
	if got := len(cl.Addrs()); got != redistest.ClusterSize {
		t.Fatalf("%d addrs, want %d", got, redistest.ClusterSize)
	}
	ctx := ctxT(t)
	c := cl.Client()
	// Keys spread over all masters.
	for i := 0; i < 100; i++ {
		if err := c.Set(ctx, fmt.Sprintf("key-%d", i), i, 0).Err(); err != nil {
			t.Fatal(err)
		}
	}
	total := int64(0)
	for i, n := range cl.Nodes() {
		k, err := n.Client().DBSize(ctx).Result()
		if err != nil {
			t.Fatal(err)
		}
		if k == 0 {
			t.Errorf("node %d holds no keys of 100", i)
		}
		total += k
	}
	if total != 100 {
		t.Fatalf("cluster holds %d keys, want 100", total)
	}
	// Same hash tag, same slot: a multi-key command works.
	if err := c.MSet(ctx, "{u1}a", 1, "{u1}b", 2).Err(); err != nil {
		t.Fatalf("MSET with one hash tag: %v", err)
	}
	// A restarted node rejoins with its slots and no data.
	n0 := cl.Nodes()[0]
	n0.Restart()
	cl.WaitOK()
	if k, err := n0.Client().DBSize(ctx).Result(); err != nil || k != 0 {
		t.Fatalf("DBSIZE on restarted node = %d, %v", k, err)
	}
}

// TestStartClusterAsync: a cluster begun before t.Parallel is, once
// waited for, a cluster like StartCluster's: ClusterSize masters, every
// one holding some of 100 keys written through a client, and a multi-key
// command of one hash tag works.
func TestStartClusterAsync(t *testing.T) {
	wait := redistest.StartClusterAsync(t)
	t.Parallel()
	cl := wait()
	if got := len(cl.Nodes()); got != redistest.ClusterSize {
		t.Fatalf("%d masters, want %d", got, redistest.ClusterSize)
	}
	ctx := ctxT(t)
	c := cl.Client()
	for i := 0; i < 100; i++ {
		if err := c.Set(ctx, fmt.Sprintf("key-%d", i), i, 0).Err(); err != nil {
			t.Fatal(err)
		}
	}
	for i, n := range cl.Nodes() {
		if k, err := n.Client().DBSize(ctx).Result(); err != nil || k == 0 {
			t.Errorf("node %d holds %d keys of 100 (%v)", i, k, err)
		}
	}
	if err := c.MSet(ctx, "{u1}a", 1, "{u1}b", 2).Err(); err != nil {
		t.Fatalf("MSET with one hash tag: %v", err)
	}
}

func TestSentinel(t *testing.T) {
	t.Parallel()
	sn := redistest.StartSentinel(t)
	ctx := ctxT(t)
	c := sn.Client()
	if err := c.Set(ctx, "k", "v", 0).Err(); err != nil {
		t.Fatal(err)
	}
	if got, err := sn.Master().Client().Get(ctx, "k").Result(); err != nil || got != "v" {
		t.Fatalf("GET k on the master = %q, %v; the failover client did not write there", got, err)
	}
}

func TestClusterWithReplicas(t *testing.T) {
	t.Parallel()
	cl := redistest.StartClusterWithReplicas(t)
	masters, replicas := cl.Nodes(), cl.Replicas()
	if len(masters) != redistest.ClusterSize || len(replicas) != redistest.ClusterSize {
		t.Fatalf("%d masters and %d replicas, want %d each", len(masters), len(replicas), redistest.ClusterSize)
	}
	ctx := ctxT(t)
	for i, r := range replicas {
		id, err := masters[i].Client().ClusterMyID(ctx).Result()
		if err != nil {
			t.Fatal(err)
		}
		info, err := r.Client().Info(ctx, "replication").Result()
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(info, "role:slave") || !strings.Contains(info, "master_port:"+strconv.Itoa(masters[i].Port())) {
			t.Fatalf("replica %d does not replicate master %d (%s): %s", i, i, id, info)
		}
	}
	// A write reaches the replica of its master.
	c := cl.Client()
	if err := c.Set(ctx, "k", "v", 0).Err(); err != nil {
		t.Fatal(err)
	}
	for i, m := range masters {
		if n, err := m.Client().Exists(ctx, "k").Result(); err != nil || n != 1 {
			continue
		}
		if n, err := m.Client().Do(ctx, "WAIT", 1, 5000).Int(); err != nil || n != 1 {
			t.Fatalf("WAIT on master %d: %d replicas, %v", i, n, err)
		}
		// READONLY holds for one connection: read on that one.
		r := replicas[i].Client().Conn()
		defer r.Close()
		if err := r.ReadOnly(ctx).Err(); err != nil {
			t.Fatal(err)
		}
		if got, err := r.Get(ctx, "k").Result(); err != nil || got != "v" {
			t.Fatalf("GET k on replica %d = %q, %v", i, got, err)
		}
		return
	}
	t.Fatal("no master holds k")
}
