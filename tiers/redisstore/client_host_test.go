package redisstore_test

import (
	"testing"

	"github.com/floodgate-go/floodgate/tiers/redisstore"
)

// TestNewClientNoHost: a URL without a host (REDIS_URL="redis://" from
// an unset ${HOST}) is an error naming the missing host; go-redis took it
// as localhost:6379, the system Redis. No connection is made.
func TestNewClientNoHost(t *testing.T) {
	for _, u := range []string{"redis://", "redis:///0", "redis://:secret@"} {
		c, err := redisstore.NewClient(u)
		if err == nil {
			t.Errorf("NewClient(%q) = %v, nil; want an error (no host)", u, c)
			c.Close()
		}
	}
}
