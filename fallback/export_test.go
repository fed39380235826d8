package fallback

// MaxRules is maxRules, for the tests of package fallback_test.
const MaxRules = maxRules

// WithManualSync makes the Store start no background Sync: tests on fake
// time call Sync themselves.
func WithManualSync() Option { return func(c *config) { c.manualSync = true } }

// Background reports the Store's background work now: whether a
// background Sync runs, and how many calls run late (callLate's
// goroutines).
func (s *Store) Background() (syncing bool, late int64) {
	return s.ch.running.Load(), s.lateN.Load()
}
