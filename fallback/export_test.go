package fallback

// MaxRules is maxRules, for the tests of package fallback_test.
const MaxRules = maxRules

// WithManualSync makes the Store start no background Sync: tests on fake
// time call Sync themselves.
func WithManualSync() Option { return func(c *config) { c.manualSync = true } }
