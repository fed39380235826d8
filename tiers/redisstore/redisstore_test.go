package redisstore_test

import (
	"context"
	"fmt"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/quota"
	"github.com/floodgate-go/floodgate/testing/clock"
	"github.com/floodgate-go/floodgate/testing/redistest"
	"github.com/floodgate-go/floodgate/tiers/redisstore"
)

// counter is a go-redis hook that counts the commands a client sends, by
// name, including each command of a pipeline.
type counter struct {
	mu sync.Mutex
	n  map[string]int
}

func newCounter() *counter { return &counter{n: map[string]int{}} }

func (c *counter) DialHook(next redis.DialHook) redis.DialHook { return next }

func (c *counter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		c.add(cmd.Name())
		return next(ctx, cmd)
	}
}

func (c *counter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		for _, cmd := range cmds {
			c.add(cmd.Name())
		}
		return next(ctx, cmds)
	}
}

func (c *counter) add(name string) {
	c.mu.Lock()
	c.n[name]++
	c.mu.Unlock()
}

// take returns a snapshot of the counts and resets them.
func (c *counter) take() map[string]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := c.n
	c.n = map[string]int{}
	return out
}

func bucket(key string, l quota.Limit, cost int64) quota.Bucket {
	return quota.Bucket{Key: key, Limit: l, Cost: cost}
}

var (
	tb100  = quota.Limit{Algorithm: quota.TokenBucket, Rate: 10, Period: time.Second, Burst: 100}
	gcra50 = quota.Limit{Algorithm: quota.GCRA, Rate: 10, Period: time.Second, Burst: 50}
	swl30  = quota.Limit{Algorithm: quota.SlidingWindowLog, Rate: 30, Period: time.Second}
	big    = quota.Limit{Algorithm: quota.TokenBucket, Rate: 1, Period: time.Hour, Burst: 1_000_000}
)

func mustTake(t testing.TB, st quota.Store, bs []quota.Bucket) (bool, []quota.Result) {
	t.Helper()
	res := make([]quota.Result, len(bs))
	ok, err := st.Take(context.Background(), bs, res)
	if err != nil {
		t.Fatalf("Take: %v", err)
	}
	return ok, res
}

// TestOneRoundTrip proves that a Take on standalone Redis (plain client,
// and failover client through Sentinel) is exactly one EVALSHA and nothing
// else, for 1 and for 4 levels, allowed or denied.
func TestOneRoundTrip(t *testing.T) {
	t.Parallel()
	t.Run("standalone", func(t *testing.T) {
		t.Parallel()
		srv := redistest.Start(t)
		oneRoundTrip(t, srv.NewClient())
	})
	t.Run("sentinel", func(t *testing.T) {
		t.Parallel()
		sn := redistest.StartSentinel(t)
		oneRoundTrip(t, sn.Client())
	})
}

func oneRoundTrip(t *testing.T, c *redis.Client) {
	cnt := newCounter()
	c.AddHook(cnt)
	st, err := redisstore.New(c)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	cnt.take() // forget SCRIPT LOAD
	levels := []quota.Limit{
		tb100,
		gcra50,
		{Algorithm: quota.SlidingWindowCounter, Rate: 100, Period: time.Minute},
		{Algorithm: quota.FixedWindow, Rate: 100, Period: time.Minute},
	}
	for _, n := range []int{1, 4} {
		t.Run(fmt.Sprintf("%d_levels", n), func(t *testing.T) {
			bs := make([]quota.Bucket, n)
			for i := range bs {
				bs[i] = bucket(fmt.Sprintf("rt%d:%d", n, i), levels[i], 1)
			}
			const takes = 150 // enough that some deny (burst 50 / 100)
			allowed := 0
			for i := 0; i < takes; i++ {
				if ok, _ := mustTake(t, st, bs); ok {
					allowed++
				}
			}
			got := cnt.take()
			want := map[string]int{"evalsha": takes}
			if fmt.Sprint(got) != fmt.Sprint(want) {
				t.Fatalf("commands sent for %d takes of %d levels: %v, want %v", takes, n, got, want)
			}
			if allowed == 0 || allowed == takes {
				t.Fatalf("allowed %d of %d: want both allows and denies in the sample", allowed, takes)
			}
		})
	}
}

// TestNoScript: after SCRIPT FLUSH and after a restart (empty script
// cache), Take still succeeds: one EVALSHA answered NOSCRIPT, one EVAL, and
// then EVALSHA again.
func TestNoScript(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	c := srv.NewClient()
	cnt := newCounter()
	c.AddHook(cnt)
	st, err := redisstore.New(c)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	bs := []quota.Bucket{bucket("ns:a", tb100, 1), bucket("ns:b", gcra50, 1)}
	mustTake(t, st, bs)
	cnt.take()

	check := func(name string) {
		t.Helper()
		if ok, _ := mustTake(t, st, bs); !ok {
			t.Fatalf("%s: take denied", name)
		}
		if got := cnt.take(); got["evalsha"] != 1 || got["eval"] != 1 || len(got) != 2 {
			t.Fatalf("%s: commands = %v, want one evalsha (NOSCRIPT) and one eval", name, got)
		}
		mustTake(t, st, bs)
		if got := cnt.take(); got["evalsha"] != 1 || len(got) != 1 {
			t.Fatalf("%s: next take sent %v, want one evalsha (script reloaded by EVAL)", name, got)
		}
	}
	srv.ScriptFlush()
	check("after SCRIPT FLUSH")

	srv.Restart()
	// The pool's connections died with the server; go-redis redials. The
	// first command may still fail on a dead pooled connection, so allow
	// one retry of the take as a client would.
	for i := 0; i < 3; i++ {
		if err := c.Ping(context.Background()).Err(); err == nil {
			break
		}
	}
	cnt.take()
	check("after restart")
}

// storesN returns n stores over n separate clients (as n pods) sharing
// clk (nil: Redis TIME), built with opts.
func storesN(t *testing.T, n int, client func() redis.UniversalClient, clk floodgate.Clock, opts ...redisstore.Option) []*redisstore.Store {
	t.Helper()
	if clk != nil {
		opts = append(opts[:len(opts):len(opts)], redisstore.WithClock(clk), redisstore.WithMinTTL(time.Minute))
	}
	out := make([]*redisstore.Store, n)
	for i := range out {
		st, err := redisstore.New(client(), opts...)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = st.Close() })
		out[i] = st
	}
	return out
}

// storm runs pods x goroutines, each making attempts takes of bs built by
// mk (given pod and goroutine), and returns how many were allowed. Any
// error fails the test, but for retried (a denied multi-slot take whose
// refund could not be sent in time, and is sent again in the background:
// a denial) when it is not nil, which counts those instead.
func storm(t *testing.T, stores []*redisstore.Store, goroutines, attempts int, mk func(pod, g, i int) []quota.Bucket, retried *atomic.Int64) int64 {
	t.Helper()
	var allowed atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, len(stores)*goroutines)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for p, st := range stores {
		for g := 0; g < goroutines; g++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				var res [8]quota.Result
				for i := 0; i < attempts; i++ {
					bs := mk(p, g, i)
					ok, err := st.Take(ctx, bs, res[:len(bs)])
					if err != nil && retried != nil && strings.Contains(err.Error(), "retried in the background") {
						retried.Add(1)
						continue
					}
					if err != nil {
						errs <- err
						return
					}
					if ok {
						allowed.Add(1)
					}
				}
			}()
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("Take: %v", err)
	}
	return allowed.Load()
}

// TestAggregateFrozen: 8 pods x 16 goroutines against one Redis with the
// store clock frozen: exactly the burst (token bucket, GCRA) or the window
// limit (sliding log) is admitted, no more, no less.
func TestAggregateFrozen(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	for _, l := range []quota.Limit{tb100, gcra50, swl30} {
		t.Run(l.Algorithm.String(), func(t *testing.T) {
			clk := clock.New(time.Time{})
			stores := storesN(t, 8, func() redis.UniversalClient { return srv.NewClient() }, clk)
			key := "agg:" + l.Algorithm.String()
			got := storm(t, stores, 16, 10, func(_, _, _ int) []quota.Bucket {
				return []quota.Bucket{bucket(key, l, 1)}
			}, nil)
			if want := l.Capacity(); got != want {
				t.Fatalf("1280 attempts on a frozen clock: allowed %d, want exactly %d", got, want)
			}
		})
	}
}

// TestSlidingLogNeverExceeds: a fleet on a fake clock that a driver
// moves forward in 7 ms steps while 8 pods x 16 goroutines take; no window
// of the limit's length ever holds more than N admissions, whatever the
// schedule, and at least N are admitted in all.
func TestSlidingLogNeverExceeds(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	clk := clock.New(time.Time{})
	stores := storesN(t, 8, func() redis.UniversalClient { return srv.NewClient() }, clk)
	l := quota.Limit{Algorithm: quota.SlidingWindowLog, Rate: 20, Period: 100 * time.Millisecond}
	var mu sync.RWMutex // readers: takes; writer: the clock driver
	var adm sync.Mutex
	var admitted []time.Time
	stop := make(chan struct{})
	driverDone := make(chan struct{})
	go func() {
		defer close(driverDone)
		for i := 0; i < 200; i++ {
			select {
			case <-stop:
				return
			case <-time.After(time.Millisecond):
			}
			mu.Lock()
			clk.Advance(7 * time.Millisecond)
			mu.Unlock()
		}
	}()
	var wg sync.WaitGroup
	for _, st := range stores {
		for g := 0; g < 16; g++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				var res [1]quota.Result
				bs := []quota.Bucket{bucket("swl:live", l, 1)}
				for i := 0; i < 60; i++ {
					mu.RLock()
					now := clk.Now()
					ok, err := st.Take(context.Background(), bs, res[:])
					mu.RUnlock()
					if err != nil {
						t.Errorf("Take: %v", err)
						return
					}
					if ok {
						adm.Lock()
						admitted = append(admitted, now)
						adm.Unlock()
					}
				}
			}()
		}
	}
	wg.Wait()
	close(stop)
	<-driverDone
	// Sort and slide.
	sortTimes(admitted)
	if len(admitted) < int(l.Rate) {
		t.Fatalf("only %d admitted", len(admitted))
	}
	j := 0
	for i := range admitted {
		for admitted[i].Sub(admitted[j]) >= l.Period {
			j++
		}
		if n := i - j + 1; n > int(l.Rate) {
			t.Fatalf("%d admissions within %s ending at %s, limit %d", n, l.Period, admitted[i].Sub(clock.Epoch), l.Rate)
		}
	}
	t.Logf("%d admitted over %s of fake time", len(admitted), clk.Now().Sub(clock.Epoch))
}

func sortTimes(ts []time.Time) {
	// insertion sort is fine for a few thousand values
	for i := 1; i < len(ts); i++ {
		for j := i; j > 0 && ts[j].Before(ts[j-1]); j-- {
			ts[j], ts[j-1] = ts[j-1], ts[j]
		}
	}
}

// allOrNothing: pods x goroutines take tenant+user+ip where the tenant
// admits only 37; afterwards the user and IP buckets hold exactly the
// admitted count, summed over users and IPs. On a cluster the three sit
// in three slots, and a take the tenant denies refunds what the other
// two charged; a refund that could not be sent within its deadline (a
// busy machine) is the take's error and is sent again in the background:
// the counts are read once every store's retrier is done.
func allOrNothing(t *testing.T, mkClient func() redis.UniversalClient, keyPrefix string, opts ...redisstore.Option) {
	clk := clock.New(time.Time{})
	stores := storesN(t, 8, mkClient, clk, opts...)
	tenant := quota.Limit{Algorithm: quota.TokenBucket, Rate: 1, Period: time.Hour, Burst: 37}
	users := []string{"u0", "u1", "u2", "u3"}
	ips := []string{"ip0", "ip1", "ip2"}
	uKey := func(u string) string { return keyPrefix + "{user=" + u + "}:user" }
	iKey := func(ip string) string { return keyPrefix + "{ip=" + ip + "}:ip" }
	tKey := keyPrefix + "{tenant=acme}:tenant"
	mk := func(p, g, i int) []quota.Bucket {
		return []quota.Bucket{
			bucket(uKey(users[(p+g+i)%len(users)]), big, 1),
			bucket(iKey(ips[(p*16+g+i)%len(ips)]), big, 1),
			bucket(tKey, tenant, 1),
		}
	}
	var retried atomic.Int64
	got := storm(t, stores, 16, 8, mk, &retried)
	if got != tenant.Burst {
		t.Fatalf("allowed %d of 1024, want exactly the tenant's %d", got, tenant.Burst)
	}
	if n := retried.Load(); n > 0 {
		t.Logf("%d refunds not sent in time, sent again in the background", n)
		deadline := time.Now().Add(30 * time.Second)
		for _, st := range stores {
			for !redisstore.RetrierIdle(st) {
				if time.Now().After(deadline) {
					t.Fatal("refunds still waiting to be sent again 30s after the takes")
				}
				time.Sleep(10 * time.Millisecond)
			}
			if lost := redisstore.RefundsLost(st); lost != 0 {
				t.Fatalf("%d refunds given up or dropped", lost)
			}
		}
	}
	// Read consumption with cost-0 takes: Remaining = floor(tokens).
	read := func(key string) int64 {
		_, res := mustTake(t, stores[0], []quota.Bucket{bucket(key, big, 0)})
		return big.Burst - res[0].Remaining
	}
	var uSum, iSum int64
	for _, u := range users {
		uSum += read(uKey(u))
	}
	for _, ip := range ips {
		iSum += read(iKey(ip))
	}
	if uSum != got || iSum != got {
		t.Fatalf("after %d allowed: users consumed %d, IPs consumed %d; want both = %d", got, uSum, iSum, got)
	}
}

func TestAllOrNothingStandalone(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	allOrNothing(t, func() redis.UniversalClient { return srv.NewClient() }, "aon:")
}

// TestAllOrNothingCluster: allOrNothing on the shared cluster, each pod
// its own client of it, the keys under the test's own prefix.
func TestAllOrNothingCluster(t *testing.T) {
	t.Parallel()
	c, prefix := redisstore.SharedCluster(t)
	// The levels must really be spread over slots (and nodes) for this test
	// to exercise refunds.
	slots := map[int]bool{}
	for _, k := range []string{"aon:{user=u0}:user", "aon:{ip=ip0}:ip", "aon:{tenant=acme}:tenant"} {
		slots[redisstore.Slot(k)] = true
	}
	if len(slots) != 3 {
		t.Fatalf("test keys share slots: %v", slots)
	}
	allOrNothing(t, func() redis.UniversalClient {
		cc := redis.NewClusterClient(c.Options())
		t.Cleanup(func() { _ = cc.Close() })
		return cc
	}, "aon:", redisstore.WithPrefix(prefix))
}

// TestDenialCache: a denied bucket with CacheDenials is answered locally
// (no Redis command) until its retry-after passes on the store's clock,
// and a changed limit is not answered from the old denial.
func TestDenialCache(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	c := srv.NewClient()
	cnt := newCounter()
	c.AddHook(cnt)
	clk := clock.New(time.Time{})
	st := fakeTimeStore(t, c, clk, redisstore.WithDenialCache(100))
	l := quota.Limit{Algorithm: quota.FixedWindow, Rate: 2, Period: time.Second}
	bs := []quota.Bucket{
		{Key: "dc:user", Limit: big, Cost: 1},
		{Key: "dc:login", Limit: l, Cost: 1, CacheDenials: true},
	}
	for i := 0; i < 2; i++ {
		if ok, _ := mustTake(t, st, bs); !ok {
			t.Fatalf("take %d denied", i)
		}
	}
	clk.Advance(100 * time.Millisecond)
	ok, res := mustTake(t, st, bs) // Redis denies: cached until the window ends
	if ok || res[1].Source != floodgate.SourceStore || res[1].RetryAfter != 900*time.Millisecond {
		t.Fatalf("third take: ok=%v res=%+v, want a store deny with retry 900ms", ok, res[1])
	}
	cnt.take()
	clk.Advance(500 * time.Millisecond)
	for i := 0; i < 5; i++ {
		ok, res := mustTake(t, st, bs)
		if ok || res[1].Source != floodgate.SourceCache || res[1].Allowed || res[1].RetryAfter != 400*time.Millisecond || res[1].Limit != 2 {
			t.Fatalf("cached take %d: ok=%v res=%+v, want a cache deny with retry 400ms", i, ok, res[1])
		}
	}
	if got := cnt.take(); len(got) != 0 {
		t.Fatalf("cached takes sent %v to Redis, want nothing", got)
	}
	if st.CacheHits() != 5 {
		t.Fatalf("CacheHits = %d, want 5", st.CacheHits())
	}
	// The user level was not charged by the cached denials.
	_, res = mustTake(t, st, []quota.Bucket{{Key: "dc:user", Limit: big, Cost: 0}})
	if res[0].Remaining != big.Burst-2 {
		t.Fatalf("user remaining %d, want %d", res[0].Remaining, big.Burst-2)
	}
	// A changed limit goes to Redis (and is allowed: 3 per window > 2 used).
	bs3 := []quota.Bucket{bs[0], {Key: "dc:login", Limit: quota.Limit{Algorithm: quota.FixedWindow, Rate: 3, Period: time.Second}, Cost: 1, CacheDenials: true}}
	cnt.take()
	if ok, res := mustTake(t, st, bs3); !ok || res[1].Source != floodgate.SourceStore {
		t.Fatalf("changed limit: ok=%v res=%+v, want allowed by the store", ok, res[1])
	}
	if got := cnt.take(); got["evalsha"] != 1 {
		t.Fatalf("changed limit sent %v, want one evalsha", got)
	}
	// When the retry-after has passed, the old limit goes to Redis again.
	clk.Advance(400 * time.Millisecond)
	if ok, res := mustTake(t, st, bs); !ok || res[1].Source != floodgate.SourceStore {
		t.Fatalf("after retry-after: ok=%v res=%+v, want allowed by the store", ok, res[1])
	}
	if st.CacheHits() != 5 {
		t.Fatalf("CacheHits = %d, want still 5", st.CacheHits())
	}
}

// TestHostileKeysCluster: bucket keys full of braces, colons, newlines,
// invalid UTF-8 and 10 kB strings, mixed in one take across slots, never
// produce a CROSSSLOT (or any) error, and each key lands in the slot of
// its own first hash tag as Redis itself computes it.
//
// On the shared cluster, its keys under the test's own prefix, which
// holds no brace.
func TestHostileKeysCluster(t *testing.T) {
	t.Parallel()
	c, prefix := redisstore.SharedCluster(t)
	clk := clock.New(time.Time{})
	st := fakeTimeStore(t, c, clk, redisstore.WithPrefix(prefix))
	keys := hostileKeys()
	ctx := context.Background()
	for _, k := range keys {
		full := prefix + k
		want, err := c.ClusterKeySlot(ctx, full).Result()
		if err != nil {
			t.Fatalf("CLUSTER KEYSLOT: %v", err)
		}
		if got := redisstore.Slot(full); int64(got) != want {
			t.Fatalf("Slot(%q) = %d, Redis says %d", trunc(full), got, want)
		}
	}
	l := quota.Limit{Algorithm: quota.FixedWindow, Rate: 3, Period: time.Hour}
	for i := 0; i+4 <= len(keys); i += 2 {
		bs := []quota.Bucket{bucket(keys[i], l, 1), bucket(keys[i+1], l, 1), bucket(keys[i+2], l, 1), bucket(keys[i+3], l, 1)}
		if ok, _ := mustTake(t, st, bs); !ok {
			t.Fatalf("take of keys %d..%d denied", i, i+3)
		}
	}
}

func trunc(s string) string {
	if len(s) > 40 {
		return s[:40] + "..."
	}
	return s
}

func hostileKeys() []string {
	long := strings.Repeat("x", 10_000)
	return []string{
		"{", "}", "{}", "}{", "{}{a}", "{a}{b}", "a{b}c", "{a", "a}",
		"fg:{user=a}:x", "{user=a}:x\n{user=b}", "\xff\xfe{\xc3}", "::::",
		"{" + long + "}", long, "{tenant=" + long[:100] + "}:t", "\x00{\x00}\x00",
		"{user=a%7Bb}:rule", "{user=a}:rule:{ip=1.2.3.4}", "\r\n{\r\n}",
	}
}

// TestNewRejectsBadOptions: bad options are errors that name the problem.
func TestNewRejectsBadOptions(t *testing.T) {
	t.Parallel()
	c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", DialTimeout: 50 * time.Millisecond, MaxRetries: -1, ContextTimeoutEnabled: true})
	defer c.Close()
	cases := []struct {
		name string
		opt  redisstore.Option
		want string
	}{
		{"brace prefix", redisstore.WithPrefix("fg{x}:"), `redisstore: WithPrefix: prefix "fg{x}:" must not contain '{' or '}' (it would change cluster hash tags)`},
		{"nil clock", redisstore.WithClock(nil), "redisstore: WithClock: clock is nil"},
		{"negative cache", redisstore.WithDenialCache(-1), "redisstore: WithDenialCache: size -1 must be >= 0"},
		{"tiny ttl", redisstore.WithMinTTL(time.Microsecond), "redisstore: WithMinTTL: 1µs must be >= 1ms"},
		{"no flushers", redisstore.WithBatching(0, 8), "redisstore: WithBatching: flushers 0 and max 8 must both be >= 1, or both 0 to turn batching off"},
		{"negative max", redisstore.WithBatching(2, -1), "redisstore: WithBatching: flushers 2 and max -1 must both be >= 1, or both 0 to turn batching off"},
		{"nil option", nil, "redisstore: nil Option"},
	}
	for _, tc := range cases {
		if st, err := redisstore.New(c, tc.opt); st != nil || err == nil || err.Error() != tc.want {
			t.Errorf("%s: New = %v, %v; want nil, %q", tc.name, st, err, tc.want)
		}
	}
	// Every bad option is named, not only the first.
	_, err := redisstore.New(nil, redisstore.WithMinTTL(0), redisstore.WithClock(nil))
	if want := "redisstore: client is nil\nredisstore: WithMinTTL: 0s must be >= 1ms\nredisstore: WithClock: clock is nil"; err == nil || err.Error() != want {
		t.Errorf("New(nil, two bad options) = %v, want %q", err, want)
	}
	ring := redis.NewRing(&redis.RingOptions{Addrs: map[string]string{"a": "127.0.0.1:1"}})
	defer ring.Close()
	if _, err := redisstore.New(ring); err == nil || !strings.Contains(err.Error(), "Ring") {
		t.Errorf("New(ring): %v, want an error naming Ring", err)
	}
	// New succeeds while Redis is unreachable; Take then reports an error.
	st, err := redisstore.New(c)
	if err != nil {
		t.Fatalf("New against a down Redis: %v", err)
	}
	defer st.Close()
	var res [1]quota.Result
	if _, err := st.Take(context.Background(), []quota.Bucket{bucket("k", tb100, 1)}, res[:]); err == nil {
		t.Fatal("Take against a down Redis returned no error")
	} else if _, ok := err.(net.Error); !ok && !strings.Contains(err.Error(), "redisstore") {
		t.Fatalf("Take error %v does not say where it came from", err)
	}
}

// TestEveryKeyHasTTL: after a take of each algorithm on Redis TIME, every
// key the store wrote has a TTL no longer than the Algorithm doc's (after
// rounding up: to whole ms, and above 1 s to whole seconds) raised to the
// min TTL, plus the min TTL of slack a string state's deadline gets; with
// a min TTL of 1 ms that is the doc's TTL within 2 ms. And the server
// never holds a key that is no bucket's, or one without a TTL.
//
// A TTL only falls once set, so a PTTL read however late is at most the
// TTL set: the bound holds on a busy machine. A key whose TTL is 100 ms
// may expire before PTTL reads it there; that reading says nothing, and
// the take is made again on a new key, up to 5 times.
func TestEveryKeyHasTTL(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	c := srv.NewClient()
	cases := []struct {
		l   quota.Limit
		max time.Duration // the longest TTL the doc allows after one unit
		log bool          // the log gets no deadline slack
	}{
		{quota.Limit{Algorithm: quota.TokenBucket, Rate: 10, Period: time.Second, Burst: 20}, 100 * time.Millisecond, false},
		{quota.Limit{Algorithm: quota.GCRA, Rate: 10, Period: time.Second, Burst: 20}, 100 * time.Millisecond, false},
		{quota.Limit{Algorithm: quota.SlidingWindowCounter, Rate: 10, Period: time.Second}, 2 * time.Second, false},
		{quota.Limit{Algorithm: quota.SlidingWindowLog, Rate: 10, Period: time.Second}, time.Second, true},
		{quota.Limit{Algorithm: quota.FixedWindow, Rate: 10, Period: time.Second}, time.Second, false},
	}
	ctx := context.Background()
	buckets := map[string]bool{} // every key a take was given
	// everyKey checks every key on the server: a bucket's, with a TTL.
	everyKey := func(after string) {
		t.Helper()
		keys, err := c.Keys(ctx, "*").Result()
		if err != nil {
			t.Fatal(err)
		}
		for _, k := range keys {
			if !buckets[k] {
				t.Errorf("after %s: key %q is no bucket's", after, k)
			}
			if d, err := c.PTTL(ctx, k).Result(); err != nil || d == -1 { // -2: expired since KEYS
				t.Errorf("after %s: key %q has no TTL (PTTL %v, %v)", after, k, d, err)
			}
		}
	}
	for _, minTTL := range []time.Duration{time.Millisecond, time.Second} { // the least, and the default
		prefix := fmt.Sprintf("ttl%d:", minTTL.Milliseconds())
		st, err := redisstore.New(c, redisstore.WithPrefix(prefix), redisstore.WithMinTTL(minTTL))
		if err != nil {
			t.Fatal(err)
		}
		defer st.Close()
		for _, tc := range cases {
			name := fmt.Sprintf("min TTL %s, %s", minTTL, tc.l.Algorithm)
			var ttl time.Duration
			for attempt := 1; ; attempt++ {
				key := fmt.Sprintf("k:%s:%d", tc.l.Algorithm, attempt)
				buckets[prefix+key] = true
				if ok, _ := mustTake(t, st, []quota.Bucket{bucket(key, tc.l, 1)}); !ok {
					t.Fatalf("%s: first take denied", name)
				}
				if ttl, err = c.PTTL(ctx, prefix+key).Result(); err != nil {
					t.Fatal(err)
				}
				if ttl != -2 {
					break
				}
				if attempt == 5 {
					t.Fatalf("%s: each of 5 keys expired before PTTL read it", name)
				}
			}
			limit := max(tc.max, minTTL)
			if !tc.log {
				limit += minTTL
			}
			if ttl <= 0 || ttl > limit+time.Millisecond {
				t.Errorf("%s: PTTL = %v, want in (0, %v]", name, ttl, limit)
			}
			everyKey(name)
		}
	}
}

// TestDenialCacheBounded: the cache never holds more than its capacity.
func TestDenialCacheBounded(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	clk := clock.New(time.Time{})
	st := fakeTimeStore(t, srv.NewClient(), clk, redisstore.WithDenialCache(3))
	l := quota.Limit{Algorithm: quota.FixedWindow, Rate: 1, Period: time.Hour}
	for i := 0; i < 10; i++ {
		b := []quota.Bucket{{Key: fmt.Sprintf("bound:%d", i), Limit: l, Cost: 1, CacheDenials: true}}
		mustTake(t, st, b)
		if ok, res := mustTake(t, st, b); ok || res[0].Source != floodgate.SourceStore {
			t.Fatalf("bucket %d: second take ok=%v source=%q, want a store deny", i, ok, res[0].Source)
		}
		if n := st.CacheLen(); n > 3 {
			t.Fatalf("cache holds %d entries, capacity 3", n)
		}
	}
	if st.CacheLen() != 3 {
		t.Fatalf("cache holds %d entries after 10 denials, want 3", st.CacheLen())
	}
	// Without CacheDenials nothing is cached.
	st2 := fakeTimeStore(t, srv.NewClient(), clk)
	b := []quota.Bucket{{Key: "nocache", Limit: l, Cost: 1}}
	mustTake(t, st2, b)
	mustTake(t, st2, b)
	if st2.CacheLen() != 0 || st2.CacheHits() != 0 {
		t.Fatalf("bucket without CacheDenials cached: len %d hits %d", st2.CacheLen(), st2.CacheHits())
	}
}
