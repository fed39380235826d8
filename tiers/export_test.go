package tiers

// Accessors for the tests of package tiers_test, over what the package
// keeps unexported.

// SettleStats counts what a Limiter settled and how many requests waited.
type SettleStats = settleStats

// SettleStats returns the Limiter's settlement and waiting counters.
func (l *Limiter) SettleStats() SettleStats { return l.settleStats() }

// Waiting returns how many requests are waiting on the bucket key now in
// this process (rules with max_wait).
func (l *Limiter) Waiting(key string) int { return l.waiting(key) }

// ParseRate parses "N/duration" as the policy's rate fields do.
var ParseRate = parseRate

// MaxItems is the most items one AdmitMany call decides.
const MaxItems = maxItems
