package redisstore

import (
	"fmt"
	"strings"

	"github.com/redis/go-redis/v9"
)

// NewClient returns a go-redis client for rawURL, set up as a rate-limit
// store behind package fallback needs it:
//
//   - ContextTimeoutEnabled, so the fallback's per-call budget bounds every
//     call (without it go-redis waits for its own ReadTimeout);
//   - DialerRetries 1 and MaxRetries -1 (no retries), so a dead server
//     fails the call at once with its real cause (connection refused)
//     instead of a timeout spent in go-redis's retry backoff: the breaker
//     is the retry policy.
//
// These three are set whatever the URL says. The URL forms are go-redis's:
//
//	redis://[user:pass@]host:port[/db][?dial_timeout=1s&...]         standalone (rediss:// for TLS, unix:// for a socket)
//	redis+sentinel://host:26379[/db]?master_name=mymaster[&addr=host2:26379]  Sentinel (rediss+sentinel:// for TLS)
//	redis+cluster://host:7000[?addr=host2:7000&addr=host3:7000]       Cluster (rediss+cluster:// for TLS)
//
// The caller closes the client.
func NewClient(rawURL string) (redis.UniversalClient, error) {
	scheme, rest, ok := strings.Cut(rawURL, "://")
	if !ok {
		return nil, fmt.Errorf("redisstore: NewClient: %q is not a URL (want redis://, redis+sentinel:// or redis+cluster://)", rawURL)
	}
	base, kind, _ := strings.Cut(scheme, "+")
	switch kind {
	case "":
		o, err := redis.ParseURL(rawURL)
		if err != nil {
			return nil, fmt.Errorf("redisstore: NewClient: %w", err)
		}
		o.ContextTimeoutEnabled, o.DialerRetries, o.MaxRetries = true, 1, -1
		return redis.NewClient(o), nil
	case "sentinel":
		o, err := redis.ParseFailoverURL(base + "://" + rest)
		if err != nil {
			return nil, fmt.Errorf("redisstore: NewClient: %w", err)
		}
		if o.MasterName == "" {
			return nil, fmt.Errorf("redisstore: NewClient: %q: a Sentinel URL needs master_name", rawURL)
		}
		o.ContextTimeoutEnabled, o.DialerRetries, o.MaxRetries = true, 1, -1
		return redis.NewFailoverClient(o), nil
	case "cluster":
		o, err := redis.ParseClusterURL(base + "://" + rest)
		if err != nil {
			return nil, fmt.Errorf("redisstore: NewClient: %w", err)
		}
		o.ContextTimeoutEnabled, o.DialerRetries, o.MaxRetries = true, 1, -1
		return redis.NewClusterClient(o), nil
	}
	return nil, fmt.Errorf("redisstore: NewClient: unknown scheme %q (want redis, rediss, unix, redis+sentinel or redis+cluster)", scheme)
}
