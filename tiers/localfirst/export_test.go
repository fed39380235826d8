package localfirst

// WithManualSync makes New start no background goroutine: tests on fake
// time call Sync themselves.
func WithManualSync() Option { return func(c *config) { c.manual = true } }
