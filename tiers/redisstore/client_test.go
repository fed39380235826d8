package redisstore_test

import (
	"context"
	"errors"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/floodgate-go/floodgate/quota"
	"github.com/floodgate-go/floodgate/testing/redistest"
	"github.com/floodgate-go/floodgate/tiers/redisstore"
)

// TestNewClient: each URL form gives a client of the right kind, set up
// for the fallback, that a Store can take through.
func TestNewClient(t *testing.T) {
	if testing.Short() {
		t.Skip("starts redis-server")
	}
	srv := redistest.Start(t)
	sen := redistest.StartSentinel(t)
	cl := redistest.StartCluster(t)
	for _, tc := range []struct {
		url   string
		check func(redis.UniversalClient) bool
	}{
		{"redis://" + srv.Addr() + "/0", func(c redis.UniversalClient) bool {
			o := c.(*redis.Client).Options()
			return o.ContextTimeoutEnabled && o.DialerRetries == 1 && o.MaxRetries <= 0 // go-redis stores -1 (no retries) as 0 once the client is built
		}},
		{"redis+sentinel://" + sen.Addrs()[0] + "?master_name=" + redistest.SentinelMaster, func(c redis.UniversalClient) bool {
			o := c.(*redis.Client).Options()
			return o.ContextTimeoutEnabled && o.DialerRetries == 1 && o.MaxRetries <= 0 // go-redis stores -1 (no retries) as 0 once the client is built
		}},
		{"redis+cluster://" + cl.Addrs()[0] + "?addr=" + cl.Addrs()[1], func(c redis.UniversalClient) bool {
			o := c.(*redis.ClusterClient).Options()
			return o.ContextTimeoutEnabled && o.DialerRetries == 1 && o.MaxRetries <= 0 // go-redis stores -1 (no retries) as 0 once the client is built
		}},
	} {
		c, err := redisstore.NewClient(tc.url)
		if err != nil {
			t.Fatalf("%s: %v", tc.url, err)
		}
		if !tc.check(c) {
			t.Errorf("%s: client not set up for the fallback", tc.url)
		}
		s, err := redisstore.New(c)
		if err != nil {
			t.Fatal(err)
		}
		res := make([]quota.Result, 1)
		b := []quota.Bucket{{Key: "client:{k}", Cost: 1, Limit: quota.Limit{Algorithm: quota.TokenBucket, Rate: 10, Period: time.Second, Burst: 10}}}
		if ok, err := s.Take(context.Background(), b, res); err != nil || !ok {
			t.Errorf("%s: take %v %v", tc.url, ok, err)
		}
		_ = s.Close()
		_ = c.Close()
	}

	// A dead server is refused at once: no retry backoff turns it into a
	// timeout.
	addr := srv.Addr()
	srv.Kill()
	c, err := redisstore.NewClient("redis://" + addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	start := time.Now()
	err = c.Ping(context.Background()).Err()
	if !errors.Is(err, syscall.ECONNREFUSED) || time.Since(start) > 500*time.Millisecond {
		t.Errorf("ping of a dead server: %v after %s, want connection refused at once", err, time.Since(start))
	}
}

func TestNewClientBadURLs(t *testing.T) {
	for url, want := range map[string]string{
		"127.0.0.1:6379":                       "is not a URL",
		"mysql://127.0.0.1":                    "invalid URL scheme: mysql",
		"redis+sentinel://127.0.0.1:26379":     "needs master_name",
		"redis+cluster://127.0.0.1:7000?bad=1": "bad",
		"redis+queue://127.0.0.1":              `unknown scheme "redis+queue"`,
	} {
		if _, err := redisstore.NewClient(url); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("NewClient(%q) = %v, want an error containing %q", url, err, want)
		}
	}
}

// TestNewRefusesClientsWithoutContextTimeout: a client that would ignore
// the per-call deadline is refused, naming the setting and NewClient;
// the same client with it set is taken.
func TestNewRefusesClientsWithoutContextTimeout(t *testing.T) {
	plain := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	defer plain.Close()
	cluster := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{"127.0.0.1:1"}})
	defer cluster.Close()
	for _, c := range []redis.UniversalClient{plain, cluster} {
		_, err := redisstore.New(c, redisstore.WithBatching(0, 0))
		if err == nil || !strings.Contains(err.Error(), "ContextTimeoutEnabled") || !strings.Contains(err.Error(), "redisstore.NewClient") {
			t.Errorf("%T without ContextTimeoutEnabled: err = %v, want one naming the setting and NewClient", c, err)
		}
	}
	ok := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", ContextTimeoutEnabled: true, DialTimeout: 50 * time.Millisecond})
	defer ok.Close()
	st, err := redisstore.New(ok, redisstore.WithBatching(0, 0))
	if err != nil {
		t.Fatalf("with ContextTimeoutEnabled: %v", err)
	}
	_ = st.Close()
}
