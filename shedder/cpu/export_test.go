package cpu

import (
	"errors"
	"io/fs"

	"github.com/floodgate-go/floodgate"
)

// Test-only options.

// WithRoot sets the file system the Meter reads proc/self/cgroup,
// proc/self/mountinfo and the cgroup files from, paths relative to "/"
// (default os.DirFS("/")): tests hand it a directory of fixture files.
func WithRoot(root fs.FS) Option {
	return func(c *config) {
		if root == nil {
			c.errs = append(c.errs, errors.New("cpu: WithRoot: nil file system"))
		}
		c.root = root
	}
}

// WithClock sets the Clock elapsed time is read from (default
// floodgate.SystemClock()), for tests that advance it between fixture
// readings.
func WithClock(clock floodgate.Clock) Option {
	return func(c *config) {
		if clock == nil {
			c.errs = append(c.errs, errors.New("cpu: WithClock: nil clock"))
		}
		c.clock = clock
	}
}
