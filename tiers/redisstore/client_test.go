package redisstore_test

import (
	"context"
	"errors"
	"net"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/floodgate-go/floodgate/quota"
	"github.com/floodgate-go/floodgate/testing/redistest"
	"github.com/floodgate-go/floodgate/tiers/redisstore"
)

// TestNewClient: each URL form gives a client of the right kind, set up
// for the fallback, that a Store can take through (the cluster is the
// shared one, the stores' keys under the test's own prefix); and a dead
// server is refused at once: one dial, refused, no retry.
func TestNewClient(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("starts redis-server")
	}
	srv := redistest.Start(t)
	sen := redistest.StartSentinel(t)
	shared, prefix := redisstore.SharedCluster(t)
	clusterAddrs := shared.Options().Addrs
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
		{"redis+cluster://" + clusterAddrs[0] + "?addr=" + clusterAddrs[1], func(c redis.UniversalClient) bool {
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
		s, err := redisstore.New(c, redisstore.WithPrefix(prefix))
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

	// A dead server is refused at once: one dial, refused, and no retry
	// (of the dial, or of the command) whose backoff would turn it into a
	// timeout.
	addr := srv.Addr()
	srv.Kill()
	c, err := redisstore.NewClient("redis://" + addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	dials := &dialCounter{}
	c.AddHook(dials)
	err = c.Ping(context.Background()).Err()
	if !errors.Is(err, syscall.ECONNREFUSED) || dials.n.Load() != 1 {
		t.Errorf("ping of a dead server: %v after %d dials, want connection refused at the one dial", err, dials.n.Load())
	}
}

// dialCounter is a go-redis hook that counts the dials a client makes,
// each attempt of a dial retried.
type dialCounter struct{ n atomic.Int64 }

func (d *dialCounter) DialHook(next redis.DialHook) redis.DialHook {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		d.n.Add(1)
		return next(ctx, network, addr)
	}
}

func (d *dialCounter) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }

func (d *dialCounter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

func TestNewClientBadURLs(t *testing.T) {
	t.Parallel()
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
	t.Parallel()
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
