package fallback

import (
	"errors"
	"fmt"
	"log/slog"
	"math"
	"time"

	"github.com/sony/gobreaker/v2"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/internal/cause"
)

// The defaults of New's options, and the keys of Stats: the causes of a
// failed call to the primary store, as counted in Stats.Causes and named
// in logs (and, through package otel, as a store call's error.type), and
// the Stats.ByRule entry of the rules beyond the first 1024.
const (
	DefaultTimeout       = 5 * time.Millisecond
	DefaultClosedTimeout = 250 * time.Millisecond
	DefaultSlowGrace     = time.Second
	DefaultFailures      = 5
	DefaultOpenInterval  = time.Second
	DefaultProbes        = 1
	DefaultLocalCapacity = 10_000
	DefaultName          = "floodgate-store"

	CauseTimeout  = cause.Timeout  // the call ran out of its budget
	CauseRefused  = cause.Refused  // nothing listens: the server is down
	CauseReset    = cause.Reset    // the connection broke mid-call
	CauseNoScript = cause.NoScript // the script cache was lost and not reloaded
	CauseOOM      = cause.OOM      // Redis is out of memory (maxmemory, noeviction)
	CauseRedirect = cause.Redirect // a Redis Cluster redirect (MOVED, ASK, CLUSTERDOWN, TRYAGAIN)
	CauseOther    = cause.Other

	// OtherRule is the ByRule entry for rules beyond the first 1024.
	OtherRule = "_other"
)

// defaultFailureLogPeriod is how often store failures are logged at most.
const defaultFailureLogPeriod = time.Second

// config is what the options set.
type config struct {
	name          string
	timeout       time.Duration
	closedTimeout time.Duration
	closedSet     bool
	slowGrace     time.Duration
	failures      uint32
	openInterval  time.Duration
	probes        uint32
	instances     func() int
	localCapacity int
	clock         floodgate.Clock
	logger        *slog.Logger
	instancesSet  bool
	onStateChange func(name string, from, to gobreaker.State)
	manualSync    bool
	errs          []error
}

// Option configures a Store built by New.
type Option func(*config)

// WithTimeout sets the budget of one call to the primary store (default
// DefaultTimeout). A call still running when it passes counts as a failure
// and the fallback decides. It must be positive.
//
// It is the budget's floor: while the primary's answers take longer (a
// host so loaded that a healthy call waits for its goroutines and the
// Redis process to be scheduled), the budget follows their latency,
// smoothed as TCP's retransmission timer is (RFC 6298: the smoothed
// latency plus four times its variation), up to the closed budget
// (WithClosedTimeout), and comes back to the floor as they speed up.
// Stats.Budget reports it.
func WithTimeout(d time.Duration) Option {
	return func(c *config) {
		if d <= 0 {
			c.errs = append(c.errs, fmt.Errorf("WithTimeout(%s): the timeout must be positive", d))
		}
		c.timeout = d
	}
}

// WithFailures sets how many consecutive failed calls open the breaker
// (default DefaultFailures). It must be at least 1.
func WithFailures(n int) Option {
	return func(c *config) {
		if n < 1 || n > math.MaxInt32 {
			c.errs = append(c.errs, fmt.Errorf("WithFailures(%d): the count must be in [1, %d]", n, math.MaxInt32))
			return
		}
		c.failures = uint32(n)
	}
}

// WithOpenInterval sets how long the breaker stays open before it lets
// probes through (default DefaultOpenInterval). It must be positive.
func WithOpenInterval(d time.Duration) Option {
	return func(c *config) {
		if d <= 0 {
			c.errs = append(c.errs, fmt.Errorf("WithOpenInterval(%s): the interval must be positive", d))
		}
		c.openInterval = d
	}
}

// WithProbes sets how many calls a half-open breaker lets through to the
// primary at once, and how many of them must succeed in a row to close it
// (gobreaker's MaxRequests; default DefaultProbes). Every other call made
// while half-open is decided by the fallback, so a recovering store sees at
// most n calls from this instance until it is trusted again. It must be at
// least 1.
func WithProbes(n int) Option {
	return func(c *config) {
		if n < 1 || n > math.MaxInt32 {
			c.errs = append(c.errs, fmt.Errorf("WithProbes(%d): the count must be in [1, %d]", n, math.MaxInt32))
			return
		}
		c.probes = uint32(n)
	}
}

// WithInstances sets how the instances sharing each rule's quota are
// counted (default: 1). Local limiters run at each bucket's rate divided
// by the count, with a burst of its capacity divided by it (rounded down,
// at least 1), so the instances in fallback together admit about what the
// store would have. count is called on every local decision and must be
// cheap: pass (*fleet.Members).Count, which counts heartbeats in Redis and
// keeps the last count through an outage, or a constant func for a static
// replica count. Values below 1 count as 1.
//
// A primary store shared by other processes (one with a method Shared()
// bool returning true, as a *redisstore.Store has, found through the
// Unwrap chain) guarded without WithInstances is logged at New as a
// warning: every replica would then admit the whole limit while the
// store is away. Package guard passes the live membership count.
func WithInstances(count func() int) Option {
	return func(c *config) {
		if count == nil {
			c.errs = append(c.errs, errors.New("WithInstances(nil): the count func must not be nil"))
			return
		}
		c.instances, c.instancesSet = count, true
	}
}

// WithClosedTimeout sets the budget of a call whose buckets include a rule
// with on_store_error "closed" (default DefaultClosedTimeout, or the
// WithTimeout budget when that is longer; set explicitly it must not be
// shorter): such a rule denies when the store cannot answer, so
// it waits longer for a busy store rather than deny a login because one
// call was slow.
func WithClosedTimeout(d time.Duration) Option {
	return func(c *config) {
		if d <= 0 {
			c.errs = append(c.errs, fmt.Errorf("WithClosedTimeout(%s): the timeout must be positive", d))
			return
		}
		c.closedTimeout, c.closedSet = d, true
	}
}

// WithSlowGrace sets how recently the primary must have answered for a
// call that runs out of its budget to count as slow rather than failed
// (default DefaultSlowGrace). A slow call is decided by on_store_error
// like a failed one but is not counted against the breaker: a store that
// keeps answering other calls is busy, not down. Errors (refused, reset,
// OOM, ...) always count. It must be positive.
func WithSlowGrace(d time.Duration) Option {
	return func(c *config) {
		if d <= 0 {
			c.errs = append(c.errs, fmt.Errorf("WithSlowGrace(%s): the grace must be positive", d))
			return
		}
		c.slowGrace = d
	}
}

// WithLocalCapacity bounds the number of buckets with a local limiter
// (default DefaultLocalCapacity). When a new bucket needs a limiter and the
// set is full, the least recently used limiter is evicted; a bucket whose
// limiter was evicted starts again with a full local burst. Stats reports
// evictions. It must be at least 1.
func WithLocalCapacity(n int) Option {
	return func(c *config) {
		if n < 1 {
			c.errs = append(c.errs, fmt.Errorf("WithLocalCapacity(%d): the capacity must be at least 1", n))
		}
		c.localCapacity = n
	}
}

// WithClock sets the clock local limiters read (default
// floodgate.SystemClock()). The breaker's open interval is measured by
// gobreaker on the system clock whatever this option says.
func WithClock(clk floodgate.Clock) Option {
	return func(c *config) {
		if clk == nil {
			c.errs = append(c.errs, errors.New("WithClock(nil): the clock must not be nil"))
		}
		c.clock = clk
	}
}

// WithLogger sets the logger for breaker state changes and store failures
// (default slog.Default()).
func WithLogger(l *slog.Logger) Option {
	return func(c *config) {
		if l == nil {
			c.errs = append(c.errs, errors.New("WithLogger(nil): the logger must not be nil"))
		}
		c.logger = l
	}
}

// WithName names the breaker in logs and state-change callbacks (default
// DefaultName).
func WithName(name string) Option {
	return func(c *config) {
		if name == "" {
			c.errs = append(c.errs, errors.New("WithName(\"\"): the name must not be empty"))
		}
		c.name = name
	}
}

// WithOnStateChange registers f to be called on every breaker state
// change, after it is logged. f runs with the breaker's lock held: it must
// be fast and must not call the Store. Telemetry (package otel) adapts to
// it.
func WithOnStateChange(f func(name string, from, to gobreaker.State)) Option {
	return func(c *config) {
		if f == nil {
			c.errs = append(c.errs, errors.New("WithOnStateChange(nil): the callback must not be nil"))
		}
		c.onStateChange = f
	}
}
