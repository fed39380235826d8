package fleet

import (
	"crypto/rand"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/floodgate-go/floodgate"
)

// Defaults of a Members (the options say each).
const (
	// defaultKey is the Redis key of the member set.
	defaultKey = "fg:fleet:{members}"
	// defaultInterval is how often Run beats.
	defaultInterval = time.Second
	// defaultTTL is how long an instance counts as live after its last
	// beat.
	defaultTTL = 5 * time.Second

	// maxInstanceIDLength is the longest instance ID WithInstanceID takes.
	maxInstanceIDLength = 200
)

// logEvery is the least time between two log lines about failed beats.
const logEvery = 10 * time.Second

// Option configures New; New reports every bad one.
type Option func(*config)

type config struct {
	key      string
	id       string
	interval time.Duration
	ttl      time.Duration
	timeout  time.Duration // 0: the interval
	clock    floodgate.Clock
	static   int // 0: count from Redis
	logger   *slog.Logger
	errs     []error
}

func (c *config) fail(format string, args ...any) {
	c.errs = append(c.errs, fmt.Errorf("fleet: "+format, args...))
}

func newConfig(opts []Option) config {
	c := config{
		key:      defaultKey,
		interval: defaultInterval,
		ttl:      defaultTTL,
		logger:   slog.Default(),
	}
	for _, o := range opts {
		if o == nil {
			c.errs = append(c.errs, errors.New("fleet: nil Option"))
			continue
		}
		o(&c)
	}
	if c.id == "" {
		c.id = rand.Text()
	}
	if c.timeout == 0 {
		c.timeout = c.interval
	}
	return c
}

// WithKey sets the Redis key of the member set (default
// "fg:fleet:{members}"). It must not be empty. Instances of one service
// must agree on it; two services sharing one Redis must each set their
// own, or they count each other. The set is one key, so on Redis Cluster
// it lives in one slot whatever its name.
func WithKey(key string) Option {
	return func(c *config) {
		if key == "" {
			c.fail("WithKey: key is empty")
			return
		}
		c.key = key
	}
}

// WithInstanceID names this instance in the member set (default a random
// 26-character string from crypto/rand.Text). It must be 1 to 200 bytes
// and unique in the fleet: two instances with one ID count as one.
func WithInstanceID(id string) Option {
	return func(c *config) {
		if id == "" || len(id) > maxInstanceIDLength {
			c.fail("WithInstanceID: ID of %d bytes must be 1 to %d bytes", len(id), maxInstanceIDLength)
			return
		}
		c.id = id
	}
}

// WithHeartbeat sets how often Run beats (interval, default 1s) and how
// long an instance counts as live after its last beat (ttl, default 5s). interval must be at least 1ms; ttl must
// be longer than interval and whole milliseconds. A ttl of a few intervals
// lets an instance miss a beat or two without dropping out of the count.
func WithHeartbeat(interval, ttl time.Duration) Option {
	return func(c *config) {
		switch {
		case interval < time.Millisecond:
			c.fail("WithHeartbeat: interval %s must be at least 1ms", interval)
		case ttl <= interval:
			c.fail("WithHeartbeat: ttl %s must be longer than interval %s", ttl, interval)
		case ttl%time.Millisecond != 0:
			c.fail("WithHeartbeat: ttl %s must be whole milliseconds", ttl)
		default:
			c.interval, c.ttl = interval, ttl
		}
	}
}

// WithTimeout bounds each Redis call of Beat and Leave (default: the
// heartbeat interval, so a beat slower than the interval counts as failed
// rather than delaying the next). It must be > 0. The bound is the call's
// context deadline, which a go-redis client honours only with
// redis.Options.ContextTimeoutEnabled set; otherwise a call to a Redis that
// does not answer waits for the client's ReadTimeout. Either way Count
// never waits: a slow beat only delays the next.
func WithTimeout(d time.Duration) Option {
	return func(c *config) {
		if d <= 0 {
			c.fail("WithTimeout: %s must be > 0", d)
			return
		}
		c.timeout = d
	}
}

// WithClock makes the heartbeat script take the time from clk (passed as
// an argument) instead of Redis TIME, and measures Stale and the log
// throttle on clk too (default: Redis TIME in the script, the system clock
// for Stale). Meant for tests on fake time; in production every instance
// should use Redis TIME so that skewed clocks agree on expiries. Run still
// ticks on real time, and the key's own Redis expiry (PEXPIRE ttl) runs on
// real time. A stage built on this Members (shedder/fleetshed) reads its
// time from clk too.
func WithClock(clk floodgate.Clock) Option {
	return func(c *config) {
		if clk == nil {
			c.fail("WithClock: clock is nil")
			return
		}
		c.clock = clk
	}
}

// WithStatic overrides the count: Count always returns n (n >= 1), Stale
// is always false, and Beat, Leave and Run send nothing to Redis. With it,
// New accepts a nil client. It is the operator's switch for a fleet of
// known size, or for when Redis is not to be trusted with the count.
func WithStatic(n int) Option {
	return func(c *config) {
		if n < 1 {
			c.fail("WithStatic: count %d must be >= 1", n)
			return
		}
		c.static = n
	}
}

// WithLogger sets the logger of Run's failed beats and leaves, and of the
// beat that succeeds after failures (default slog.Default()). It must not
// be nil.
func WithLogger(l *slog.Logger) Option {
	return func(c *config) {
		if l == nil {
			c.fail("WithLogger: logger is nil")
			return
		}
		c.logger = l
	}
}
