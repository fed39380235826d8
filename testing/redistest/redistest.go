package redistest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// Option configures Start, StartCluster, StartClusterWithReplicas,
// StartSentinel and StartProcess;
// a bad one is reported (the test fails) before any process starts.
type Option func(*config)

type config struct {
	args         []string
	startTimeout time.Duration
	dialTimeout  time.Duration
	ioTimeout    time.Duration
	errs         []error
}

func defaultConfig() config {
	return config{
		startTimeout: 10 * time.Second,
		dialTimeout:  time.Second,
		ioTimeout:    2 * time.Second,
	}
}

// newConfig applies opts to the defaults and reports every bad one.
func newConfig(opts []Option) (config, error) {
	cfg := defaultConfig()
	for _, o := range opts {
		if o == nil {
			cfg.errs = append(cfg.errs, errors.New("redistest: nil Option"))
			continue
		}
		o(&cfg)
	}
	return cfg, errors.Join(cfg.errs...)
}

// WithArgs appends extra redis-server command-line arguments, for example
// WithArgs("--maxmemory", "10mb").
func WithArgs(args ...string) Option {
	return func(c *config) { c.args = append(c.args, args...) }
}

// WithStartTimeout bounds how long a start (or restart) may take before the
// test fails (default 10s; must be > 0).
func WithStartTimeout(d time.Duration) Option {
	return func(c *config) {
		if d <= 0 {
			c.errs = append(c.errs, fmt.Errorf("redistest: WithStartTimeout: %s must be > 0", d))
			return
		}
		c.startTimeout = d
	}
}

// WithClientTimeouts sets the dial timeout and the read/write timeout of the
// clients returned by Client (defaults 1s and 2s: short, so a test against
// a paused or killed server fails fast instead of hanging; each must be
// > 0).
func WithClientTimeouts(dial, io time.Duration) Option {
	return func(c *config) {
		if dial <= 0 || io <= 0 {
			c.errs = append(c.errs, fmt.Errorf("redistest: WithClientTimeouts: dial %s and io %s must be > 0", dial, io))
			return
		}
		c.dialTimeout, c.ioTimeout = dial, io
	}
}

// maxStartAttempts bounds the retries when a chosen free port was taken by
// someone else between choosing it and redis-server binding it.
const maxStartAttempts = 8

// Server is one redis-server process owned by a test. Its methods are safe
// for concurrent use.
type Server struct {
	t       testing.TB
	cfg     config
	bin     string
	cluster bool
	// sentinelOf, when set, makes this process a Sentinel monitoring the
	// master at that address under SentinelMaster.
	sentinelOf string

	mu     sync.Mutex
	port   int
	dir    string
	cmd    *exec.Cmd
	exited chan struct{} // closed when cmd has been reaped
	out    *lockedBuffer
	client *redis.Client
}

// Start starts a standalone redis-server on a free 127.0.0.1 port with
// `--save "" --appendonly no` and a private temporary directory, waits until
// it answers PING, and registers cleanup (client close, SIGKILL, reap) with
// t.Cleanup. It fails the test if the server cannot start.
func Start(t testing.TB, opts ...Option) *Server {
	t.Helper()
	cfg, err := newConfig(opts)
	if err != nil {
		t.Fatal(err)
	}
	s := newServer(t, cfg, false)
	if err := s.startFresh(); err != nil {
		t.Fatalf("redistest: %v", err)
	}
	return s
}

func newServer(t testing.TB, cfg config, cluster bool) *Server {
	t.Helper()
	bin := lookBinary(t, "redis-server")
	s := &Server{t: t, cfg: cfg, bin: bin, cluster: cluster}
	t.Cleanup(s.cleanup)
	return s
}

func lookBinary(t testing.TB, name string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err != nil {
		t.Fatalf("redistest: %s not found on PATH (%v); run `make deps` to install redis-server and redis-tools", name, err)
	}
	return p
}

// startFresh picks a free port (and, for cluster nodes, a free bus port) and
// starts the process, retrying on a port clash.
func (s *Server) startFresh() error {
	var lastErr error
	for attempt := 0; attempt < maxStartAttempts; attempt++ {
		port, err := freePort(s.cluster)
		if err != nil {
			lastErr = err
			continue
		}
		dir, err := os.MkdirTemp("", "redistest-")
		if err != nil {
			return fmt.Errorf("temp dir: %w", err)
		}
		err = s.launch(port, dir)
		if err == nil {
			return nil
		}
		_ = os.RemoveAll(dir)
		lastErr = err
		if !errors.Is(err, errPortClash) {
			return err
		}
	}
	return fmt.Errorf("could not start redis-server after %d attempts: %w", maxStartAttempts, lastErr)
}

var errPortClash = errors.New("port already in use")

// launch starts redis-server on port with data directory dir and waits for
// PING. On failure the process is killed and reaped.
func (s *Server) launch(port int, dir string) error {
	var args []string
	if s.sentinelOf != "" {
		conf := filepath.Join(dir, "sentinel.conf")
		host, mport, _ := net.SplitHostPort(s.sentinelOf)
		body := fmt.Sprintf("sentinel monitor %[1]s %[2]s %[3]s 1\nsentinel down-after-milliseconds %[1]s 1000\nsentinel failover-timeout %[1]s 3000\n",
			SentinelMaster, host, mport)
		if err := os.WriteFile(conf, []byte(body), 0o600); err != nil {
			return fmt.Errorf("sentinel config: %w", err)
		}
		args = append(args, conf, "--sentinel")
	}
	args = append(args,
		"--port", strconv.Itoa(port),
		"--bind", "127.0.0.1",
		"--save", "",
		"--appendonly", "no",
		"--dir", dir,
		"--daemonize", "no",
		"--logfile", "",
		"--loglevel", "warning",
	)
	if s.cluster {
		args = append(args,
			"--cluster-enabled", "yes",
			"--cluster-config-file", "nodes.conf",
			"--cluster-node-timeout", "2000",
		)
	}
	args = append(args, s.cfg.args...)
	cmd := exec.Command(s.bin, args...)
	out := &lockedBuffer{}
	cmd.Stdout = out
	cmd.Stderr = out
	setProcAttr(cmd)
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start %s: %w", s.bin, err)
	}
	exited := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		close(exited)
	}()

	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	if err := waitPing(addr, s.cfg.startTimeout, exited); err != nil {
		_ = cmd.Process.Kill()
		<-exited
		log := out.String()
		if bytes.Contains([]byte(log), []byte("Address already in use")) {
			return fmt.Errorf("%w: %s: %s", errPortClash, addr, log)
		}
		return fmt.Errorf("redis-server on %s: %v; output:\n%s", addr, err, log)
	}

	s.mu.Lock()
	s.port, s.dir, s.cmd, s.exited, s.out = port, dir, cmd, exited, out
	s.mu.Unlock()
	return nil
}

// waitPing polls addr with PING until it answers PONG, the process exits, or
// timeout passes.
func waitPing(addr string, timeout time.Duration, exited <-chan struct{}) error {
	deadline := time.Now().Add(timeout)
	var lastErr error
	for time.Now().Before(deadline) {
		select {
		case <-exited:
			return errors.New("process exited during start")
		default:
		}
		if lastErr = ping(addr); lastErr == nil {
			return nil
		}
		time.Sleep(10 * time.Millisecond)
	}
	return fmt.Errorf("no PONG within %s: %v", timeout, lastErr)
}

// ping sends an inline PING over a raw connection, so waiting for start does
// not depend on client pools or retries.
func ping(addr string) error {
	c, err := net.DialTimeout("tcp", addr, 200*time.Millisecond)
	if err != nil {
		return err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(500 * time.Millisecond))
	if _, err := c.Write([]byte("PING\r\n")); err != nil {
		return err
	}
	buf := make([]byte, 64)
	n, err := c.Read(buf)
	if err != nil {
		return err
	}
	if !bytes.HasPrefix(buf[:n], []byte("+PONG")) {
		return fmt.Errorf("unexpected reply %q", buf[:n])
	}
	return nil
}

// freePort returns a loopback port that was free a moment ago. For cluster
// nodes the cluster bus port (port+10000) must be free and valid too.
func freePort(cluster bool) (int, error) {
	for i := 0; i < 50; i++ {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return 0, err
		}
		port := l.Addr().(*net.TCPAddr).Port
		if !cluster {
			_ = l.Close()
			return port, nil
		}
		if port+10000 > 65535 {
			_ = l.Close()
			continue
		}
		bl, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port+10000)))
		_ = l.Close()
		if err != nil {
			continue
		}
		_ = bl.Close()
		return port, nil
	}
	return 0, errors.New("no free port pair for a cluster node after 50 tries")
}

// Addr returns the server's address, "127.0.0.1:port".
func (s *Server) Addr() string {
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(s.Port()))
}

// Port returns the server's TCP port. It stays the same across Restart.
func (s *Server) Port() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.port
}

// Client returns a go-redis client for the server, created on first use and
// closed at test cleanup. It keeps working across Restart (it reconnects).
func (s *Server) Client() *redis.Client {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.client == nil {
		s.client = s.newClientLocked()
	}
	return s.client
}

// NewClient returns a new, independent go-redis client for the server (for
// tests that simulate several processes, each with its own connection
// pool). It is closed at test cleanup.
func (s *Server) NewClient() *redis.Client {
	s.mu.Lock()
	c := s.newClientLocked()
	s.mu.Unlock()
	s.t.Cleanup(func() { _ = c.Close() })
	return c
}

func (s *Server) newClientLocked() *redis.Client {
	return redis.NewClient(&redis.Options{
		Addr:         net.JoinHostPort("127.0.0.1", strconv.Itoa(s.port)),
		DialTimeout:  s.cfg.dialTimeout,
		ReadTimeout:  s.cfg.ioTimeout,
		WriteTimeout: s.cfg.ioTimeout,
		MaxRetries:   1,
		// Honour the context's deadline, as redisstore requires.
		ContextTimeoutEnabled: true,
	})
}

// Running reports whether the server process is alive (it may be paused).
func (s *Server) Running() bool {
	s.mu.Lock()
	exited := s.exited
	s.mu.Unlock()
	if exited == nil {
		return false
	}
	select {
	case <-exited:
		return false
	default:
		return true
	}
}

// Kill sends SIGKILL to the server and waits until it has exited. Killing a
// server that is not running does nothing.
func (s *Server) Kill() {
	s.t.Helper()
	if err := s.kill(); err != nil {
		s.t.Errorf("redistest: %v", err)
	}
}

func (s *Server) kill() error {
	s.mu.Lock()
	cmd, exited := s.cmd, s.exited
	s.mu.Unlock()
	if cmd == nil {
		return nil
	}
	_ = cmd.Process.Signal(syscall.SIGKILL)
	select {
	case <-exited:
		return nil
	case <-time.After(10 * time.Second):
		return fmt.Errorf("redis-server pid %d did not exit within 10s of SIGKILL", cmd.Process.Pid)
	}
}

// Pause stops the server with SIGSTOP: connections stay open and commands
// time out, as with a stalled host. Resume continues it.
func (s *Server) Pause() { s.signal(syscall.SIGSTOP, "SIGSTOP") }

// Resume continues a server stopped by Pause (SIGCONT).
func (s *Server) Resume() { s.signal(syscall.SIGCONT, "SIGCONT") }

func (s *Server) signal(sig syscall.Signal, name string) {
	s.t.Helper()
	if err := s.sendSignal(sig, name); err != nil {
		s.t.Fatalf("redistest: %v", err)
	}
}

func (s *Server) sendSignal(sig syscall.Signal, name string) error {
	s.mu.Lock()
	cmd := s.cmd
	s.mu.Unlock()
	if cmd == nil || !s.Running() {
		return fmt.Errorf("%s to a server that is not running", name)
	}
	if err := cmd.Process.Signal(sig); err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	return nil
}

// Restart kills the server (if running) and starts a new process on the
// same port. A standalone server comes back with empty data and an empty
// script cache. A cluster node keeps its nodes.conf, so it rejoins the
// cluster with the same identity and slots, but also with empty data; a
// Sentinel keeps its configuration.
func (s *Server) Restart() {
	s.t.Helper()
	if err := s.restart(); err != nil {
		s.t.Fatalf("redistest: %v", err)
	}
}

func (s *Server) restart() error {
	if err := s.kill(); err != nil {
		return err
	}
	s.mu.Lock()
	port, dir := s.port, s.dir
	s.mu.Unlock()
	if !s.cluster && s.sentinelOf == "" {
		if err := os.RemoveAll(dir); err != nil {
			return fmt.Errorf("restart: %w", err)
		}
		nd, err := os.MkdirTemp("", "redistest-")
		if err != nil {
			return fmt.Errorf("restart: %w", err)
		}
		dir = nd
	}
	// The port was ours a moment ago; a clash is unlikely but retry briefly
	// (a lingering accept socket or another test grabbing it).
	var err error
	for attempt := 0; attempt < maxStartAttempts; attempt++ {
		if err = s.launch(port, dir); err == nil {
			return nil
		}
		if !errors.Is(err, errPortClash) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	return fmt.Errorf("restart on port %d: %w", port, err)
}

// FlushAll deletes every key on the server (FLUSHALL).
func (s *Server) FlushAll() {
	s.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), s.cfg.startTimeout)
	defer cancel()
	if err := s.Client().FlushAll(ctx).Err(); err != nil {
		s.t.Fatalf("redistest: FLUSHALL on %s: %v", s.Addr(), err)
	}
}

// ScriptFlush empties the server's script cache (SCRIPT FLUSH), so the next
// EVALSHA gets NOSCRIPT.
func (s *Server) ScriptFlush() {
	s.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), s.cfg.startTimeout)
	defer cancel()
	if err := s.Client().ScriptFlush(ctx).Err(); err != nil {
		s.t.Fatalf("redistest: SCRIPT FLUSH on %s: %v", s.Addr(), err)
	}
}

// Log returns what the current process has written to stdout and stderr.
func (s *Server) Log() string {
	s.mu.Lock()
	out := s.out
	s.mu.Unlock()
	if out == nil {
		return ""
	}
	return out.String()
}

func (s *Server) cleanup() {
	s.mu.Lock()
	client := s.client
	s.client = nil
	cmd, exited, dir := s.cmd, s.exited, s.dir
	s.mu.Unlock()
	if client != nil {
		_ = client.Close()
	}
	if cmd != nil {
		_ = cmd.Process.Signal(syscall.SIGKILL)
		select {
		case <-exited:
		case <-time.After(10 * time.Second):
			if s.t != nil { // nil for StartProcess
				s.t.Errorf("redistest: redis-server pid %d not reaped within 10s of SIGKILL", cmd.Process.Pid)
			}
		}
	}
	if dir != "" {
		_ = os.RemoveAll(dir)
	}
}

// lockedBuffer is a bytes.Buffer safe for the process's writes and the
// test's reads.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.b.Len() > 1<<20 { // keep at most ~1 MiB of server log
		return len(p), nil
	}
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}
