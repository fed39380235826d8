package localfirst

import (
	"fmt"
	"log/slog"
	"time"

	"github.com/floodgate-go/floodgate"
)

// Defaults of the options (each option says its own).
const (
	defaultLeaseTTL    = time.Second
	defaultLeaseTarget = 100 * time.Millisecond
	defaultLeaseShare  = 0.5
	defaultSyncTimeout = 250 * time.Millisecond
	defaultMaxKeys     = 100_000
)

type config struct {
	clock       floodgate.Clock
	instances   func() int
	leaseTTL    time.Duration
	leaseTarget time.Duration
	leaseShare  float64
	syncTimeout time.Duration
	maxKeys     int
	logger      *slog.Logger
	manual      bool
	errs        []error
}

func (c *config) fail(format string, args ...any) {
	c.errs = append(c.errs, fmt.Errorf("localfirst: "+format, args...))
}

// Option configures New.
type Option func(*config)

// WithClock sets the clock local decisions read (default
// floodgate.SystemClock()).
func WithClock(clk floodgate.Clock) Option {
	return func(c *config) {
		if clk == nil {
			c.fail("WithClock: nil Clock")
			return
		}
		c.clock = clk
	}
}

// WithInstances sets how the live instances sharing the budget are
// counted: count is called on every local decision and must be cheap (for
// example (*fleet.Members).Count). Values below 1 count as 1. The default
// counts 1.
func WithInstances(count func() int) Option {
	return func(c *config) {
		if count == nil {
			c.fail("WithInstances: nil func")
			return
		}
		c.instances = count
	}
}

// WithLeaseTTL sets how long leased units may be spent before the unspent
// ones go back to the store (default 1s; at least 10ms).
func WithLeaseTTL(d time.Duration) Option {
	return func(c *config) {
		if d < 10*time.Millisecond {
			c.fail("WithLeaseTTL: %s is below 10ms", d)
			return
		}
		c.leaseTTL = d
	}
}

// WithLeaseTarget sets how long a lease should last at the key's current
// demand when the key nears its limit (default 100ms;
// positive, below the lease TTL). A key whose bucket was far from empty
// at its last lease leases for longer, up to half the lease TTL in
// proportion to what the bucket held (see the package documentation).
func WithLeaseTarget(d time.Duration) Option {
	return func(c *config) {
		if d <= 0 {
			c.fail("WithLeaseTarget: %s is not positive", d)
			return
		}
		c.leaseTarget = d
	}
}

// WithLeaseShare caps one lease at share × the bucket's capacity ÷ live
// instances (default 0.5; in (0, 1]).
func WithLeaseShare(share float64) Option {
	return func(c *config) {
		if !(share > 0 && share <= 1) {
			c.fail("WithLeaseShare: %v is not in (0, 1]", share)
			return
		}
		c.leaseShare = share
	}
}

// WithSyncTimeout bounds each background call to the ledger: a report or
// a lease return (default 250ms; positive).
func WithSyncTimeout(d time.Duration) Option {
	return func(c *config) {
		if d <= 0 {
			c.fail("WithSyncTimeout: %s is not positive", d)
			return
		}
		c.syncTimeout = d
	}
}

// WithMaxKeys bounds the keys held locally (default 100 000; at
// least 1). Idle keys (nothing leased, nothing unreported) are dropped
// after 30s, and at the bound a new key takes the place of one idle and
// untouched for a second (it looks at a few keys, not all: a flood of
// new keys costs each a bounded look); when none of those is, the new
// key is decided by the exact store.
func WithMaxKeys(n int) Option {
	return func(c *config) {
		if n < 1 {
			c.fail("WithMaxKeys: %d is below 1", n)
			return
		}
		c.maxKeys = n
	}
}

// WithLogger sets the logger of background failures (default
// slog.Default()); they are logged at most once a second.
func WithLogger(l *slog.Logger) Option {
	return func(c *config) {
		if l == nil {
			c.fail("WithLogger: nil Logger")
			return
		}
		c.logger = l
	}
}
