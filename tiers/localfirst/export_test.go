package localfirst

import "github.com/floodgate-go/floodgate/quota"

// WithManualSync makes New start no background goroutine: tests on fake
// time call Sync themselves.
func WithManualSync() Option { return func(c *config) { c.manual = true } }

// Ledger is what New takes as its ledger, named for the tests' fakes.
type Ledger = quota.Reporter

// DefaultLeaseTarget is WithLeaseTarget's default, for the tests that
// bound a wait by it.
const DefaultLeaseTarget = defaultLeaseTarget
