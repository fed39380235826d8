package fleet

import "time"

// Test-only views of a Members' settings.

// ID returns this instance's member name in the Redis set.
func (m *Members) ID() string { return m.id }

// Key returns the Redis key of the member set.
func (m *Members) Key() string { return m.key }

// Settings returns the heartbeat interval, the TTL and the per-call
// timeout in force.
func (m *Members) Settings() (interval, ttl, timeout time.Duration) {
	return m.interval, m.ttl, m.timeout
}

// The defaults and bound of the options, for the tests that check them.
const (
	DefaultKey          = defaultKey
	DefaultInterval     = defaultInterval
	DefaultTTL          = defaultTTL
	MaxInstanceIDLength = maxInstanceIDLength
)
