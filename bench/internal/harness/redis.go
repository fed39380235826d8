package harness

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

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
