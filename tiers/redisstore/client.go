package redisstore

import (
	"errors"
	"fmt"
	"net/url"
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
//
// A URL without a host (go-redis would take localhost:6379), or with a
// negative pool size, is an error; errors never quote the URL's password.
func NewClient(rawURL string) (redis.UniversalClient, error) {
	shown := Redact(rawURL)
	scheme, rest, ok := strings.Cut(rawURL, "://")
	if !ok {
		return nil, fmt.Errorf("redisstore: NewClient: %q is not a URL (want redis://, redis+sentinel:// or redis+cluster://)", shown)
	}
	base, kind, _ := strings.Cut(scheme, "+")
	if kind != "" || base != "unix" {
		authority, _, _ := strings.Cut(rest, "/")
		authority, _, _ = strings.Cut(authority, "?")
		if i := strings.LastIndexByte(authority, '@'); i >= 0 {
			authority = authority[i+1:]
		}
		if authority == "" {
			return nil, fmt.Errorf("redisstore: NewClient: %q names no host (want host:port)", shown)
		}
	}
	fail := func(err error) error {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err // url.Error quotes the whole URL, password included
		}
		return fmt.Errorf("redisstore: NewClient: %q: %w", shown, err)
	}
	pools := func(size, minIdle, maxIdle, maxActive int) error {
		if size < 0 || minIdle < 0 || maxIdle < 0 || maxActive < 0 {
			return fmt.Errorf("redisstore: NewClient: %q: pool_size, min_idle_conns, max_idle_conns and max_active_conns must not be negative", shown)
		}
		return nil
	}
	switch kind {
	case "":
		o, err := redis.ParseURL(rawURL)
		if err != nil {
			return nil, fail(err)
		}
		if err := pools(o.PoolSize, o.MinIdleConns, o.MaxIdleConns, o.MaxActiveConns); err != nil {
			return nil, err
		}
		o.ContextTimeoutEnabled, o.DialerRetries, o.MaxRetries = true, 1, -1
		return redis.NewClient(o), nil
	case "sentinel":
		o, err := redis.ParseFailoverURL(base + "://" + rest)
		if err != nil {
			return nil, fail(err)
		}
		if o.MasterName == "" {
			return nil, fmt.Errorf("redisstore: NewClient: %q: a Sentinel URL needs master_name", shown)
		}
		if err := pools(o.PoolSize, o.MinIdleConns, o.MaxIdleConns, o.MaxActiveConns); err != nil {
			return nil, err
		}
		o.ContextTimeoutEnabled, o.DialerRetries, o.MaxRetries = true, 1, -1
		return redis.NewFailoverClient(o), nil
	case "cluster":
		o, err := redis.ParseClusterURL(base + "://" + rest)
		if err != nil {
			return nil, fail(err)
		}
		if err := pools(o.PoolSize, o.MinIdleConns, o.MaxIdleConns, o.MaxActiveConns); err != nil {
			return nil, err
		}
		o.ContextTimeoutEnabled, o.DialerRetries, o.MaxRetries = true, 1, -1
		return redis.NewClusterClient(o), nil
	}
	return nil, fmt.Errorf("redisstore: NewClient: unknown scheme %q (want redis, rediss, unix, redis+sentinel or redis+cluster)", scheme)
}

// Redact returns rawURL with the password of its user information, if
// any, replaced by "xxxxx", for messages and logs.
func Redact(rawURL string) string {
	scheme, rest, ok := strings.Cut(rawURL, "://")
	if !ok {
		return rawURL
	}
	authority, path, hasPath := strings.Cut(rest, "/")
	at := strings.LastIndexByte(authority, '@')
	if at < 0 {
		return rawURL
	}
	user, _, hasPass := strings.Cut(authority[:at], ":")
	if !hasPass {
		return rawURL
	}
	out := scheme + "://" + user + ":xxxxx" + authority[at:]
	if hasPath {
		out += "/" + path
	}
	return out
}
