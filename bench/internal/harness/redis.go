package harness

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// RedisServer is a redis-server process started for one bench run: no
// persistence, loopback only, its own temporary directory.
type RedisServer struct {
	// Addr is the server's host:port on 127.0.0.1.
	Addr string

	cmd  *exec.Cmd
	dir  string
	out  *syncBuffer
	done chan struct{}
	once sync.Once
}

// StartRedis starts redis-server on a free 127.0.0.1 port with
// `--save "" --appendonly no` and waits (at most timeout) until it answers
// PING. The caller must call Stop. It fails with a message naming `make deps`
// when redis-server is not on PATH.
func StartRedis(ctx context.Context, timeout time.Duration) (*RedisServer, error) {
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		return nil, errors.New("redis-server not found on PATH: run `make deps` to install it, or pass -redis host:port (or REDIS_URL) to use a running server")
	}
	var lastErr error
	for attempt := 0; attempt < 5; attempt++ {
		s, err := startRedisOnce(ctx, bin, timeout)
		if err == nil {
			return s, nil
		}
		lastErr = err
		if ctx.Err() != nil {
			break
		}
	}
	return nil, lastErr
}

func startRedisOnce(ctx context.Context, bin string, timeout time.Duration) (*RedisServer, error) {
	port, err := freePort()
	if err != nil {
		return nil, fmt.Errorf("finding a free loopback port: %w", err)
	}
	dir, err := os.MkdirTemp("", "floodgate-bench-redis-")
	if err != nil {
		return nil, fmt.Errorf("creating redis-server directory: %w", err)
	}
	s := &RedisServer{
		Addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(port)),
		dir:  dir,
		out:  &syncBuffer{},
		done: make(chan struct{}),
	}
	s.cmd = exec.Command(bin,
		"--port", strconv.Itoa(port),
		"--bind", "127.0.0.1",
		"--save", "",
		"--appendonly", "no",
		"--dir", dir,
		"--daemonize", "no",
		"--loglevel", "warning",
	)
	s.cmd.Stdout = s.out
	s.cmd.Stderr = s.out
	setProcAttr(s.cmd)
	if err := s.cmd.Start(); err != nil {
		_ = os.RemoveAll(dir)
		return nil, fmt.Errorf("starting %s: %w", bin, err)
	}
	go func() {
		_ = s.cmd.Wait()
		close(s.done)
	}()

	c := redis.NewClient(&redis.Options{Addr: s.Addr, DialTimeout: 200 * time.Millisecond, MaxRetries: -1})
	defer c.Close()
	deadline := time.Now().Add(timeout)
	for {
		pctx, cancel := context.WithTimeout(ctx, 250*time.Millisecond)
		err := c.Ping(pctx).Err()
		cancel()
		if err == nil {
			return s, nil
		}
		select {
		case <-s.done:
			s.Stop()
			return nil, fmt.Errorf("redis-server on %s exited at start: %s", s.Addr, strings.TrimSpace(s.out.String()))
		default:
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			s.Stop()
			return nil, fmt.Errorf("redis-server on %s did not answer PING within %s: %v; output: %s", s.Addr, timeout, err, strings.TrimSpace(s.out.String()))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Stop kills the server, reaps it and removes its directory. It is safe to
// call more than once.
func (s *RedisServer) Stop() {
	s.once.Do(func() {
		if s.cmd.Process != nil {
			_ = s.cmd.Process.Kill()
			select {
			case <-s.done:
			case <-time.After(5 * time.Second):
			}
		}
		_ = os.RemoveAll(s.dir)
	})
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.b.Len() > 64<<10 {
		return len(p), nil
	}
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// ParseRedisAddr turns a -redis flag or REDIS_URL value into client options:
// either host:port or a redis:// URL.
func ParseRedisAddr(s string) (*redis.Options, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return nil, errors.New("empty Redis address")
	}
	if strings.Contains(s, "://") {
		o, err := redis.ParseURL(s)
		if err != nil {
			return nil, fmt.Errorf("invalid Redis URL %q: %w", s, err)
		}
		return o, nil
	}
	if _, _, err := net.SplitHostPort(s); err != nil {
		return nil, fmt.Errorf("invalid Redis address %q (want host:port or redis://...): %w", s, err)
	}
	return &redis.Options{Addr: s}, nil
}

// Counter counts what a client sends, two ways. As a go-redis hook (add it
// with client.AddHook) it counts one round trip per command processed alone
// and one per pipeline, plus the number of commands either way. As the
// client's Dialer (Options.Dialer = counter.Dial) it counts the writes on
// the client's sockets, which is what a round trip costs on the wire
// whatever the client does above it (auto-pipelining runs command hooks per
// command but writes whole batches).
type Counter struct {
	rt     atomic.Uint64
	cmds   atomic.Uint64
	writes atomic.Uint64
}

// Writes is the number of socket writes on connections made by Dial.
func (c *Counter) Writes() uint64 { return c.writes.Load() }

// Dial dials a TCP connection whose writes are counted; use it as
// redis.Options.Dialer.
func (c *Counter) Dial(ctx context.Context, network, addr string) (net.Conn, error) {
	var d net.Dialer
	conn, err := d.DialContext(ctx, network, addr)
	if err != nil {
		return nil, err
	}
	return countingConn{Conn: conn, n: &c.writes}, nil
}

type countingConn struct {
	net.Conn
	n *atomic.Uint64
}

func (c countingConn) Write(p []byte) (int, error) {
	c.n.Add(1)
	return c.Conn.Write(p)
}

// RoundTrips is the number of commands and pipelines sent so far.
func (c *Counter) RoundTrips() uint64 { return c.rt.Load() }

// Commands is the number of commands sent so far, pipelined or not.
func (c *Counter) Commands() uint64 { return c.cmds.Load() }

// DialHook implements redis.Hook.
func (c *Counter) DialHook(next redis.DialHook) redis.DialHook { return next }

// ProcessHook implements redis.Hook.
func (c *Counter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		c.rt.Add(1)
		c.cmds.Add(1)
		return next(ctx, cmd)
	}
}

// ProcessPipelineHook implements redis.Hook.
func (c *Counter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		c.rt.Add(1)
		c.cmds.Add(uint64(len(cmds)))
		return next(ctx, cmds)
	}
}

// FillPool dials n connections of c (each answering PING) and returns them
// to its pool, so the measured phase never pays, nor counts, connection
// set-up (HELLO and friends go through the client's hooks).
func FillPool(ctx context.Context, c *redis.Client, n int) error {
	conns := make([]*redis.Conn, 0, n)
	defer func() {
		for _, cn := range conns {
			_ = cn.Close()
		}
	}()
	for i := 0; i < n; i++ {
		cn := c.Conn()
		conns = append(conns, cn)
		if err := cn.Ping(ctx).Err(); err != nil {
			return fmt.Errorf("filling the connection pool (%d of %d): %w", i+1, n, err)
		}
	}
	return nil
}

// Info reads one field of INFO section from Redis.
func Info(ctx context.Context, c *redis.Client, section, field string) (string, error) {
	s, err := c.Info(ctx, section).Result()
	if err != nil {
		return "", err
	}
	for _, line := range strings.Split(s, "\n") {
		line = strings.TrimSpace(line)
		if v, ok := strings.CutPrefix(line, field+":"); ok {
			return v, nil
		}
	}
	return "", fmt.Errorf("INFO %s has no field %q", section, field)
}

// RedisCPU returns the server's user+system CPU time so far.
func RedisCPU(ctx context.Context, c *redis.Client) (time.Duration, error) {
	var total time.Duration
	for _, f := range []string{"used_cpu_user", "used_cpu_sys"} {
		v, err := Info(ctx, c, "cpu", f)
		if err != nil {
			return 0, err
		}
		sec, err := strconv.ParseFloat(v, 64)
		if err != nil {
			return 0, fmt.Errorf("INFO cpu %s = %q: %w", f, v, err)
		}
		total += time.Duration(sec * float64(time.Second))
	}
	return total, nil
}
