// Package redisstore is a tiers.Store kept in Redis: standalone, Sentinel
// (go-redis FailoverClient) or Redis Cluster, through go-redis v9's
// redis.UniversalClient.
//
// What this package decides:
//
//   - Arithmetic. The five algorithms run inside Lua scripts (take.lua,
//     refund.lua, embedded) with exactly the arithmetic of the tiers.Algorithm
//     doc, on integer microseconds, so decisions equal the in-process
//     memstore's on the same trace. Time is Redis TIME read inside the
//     script, so pods with skewed clocks agree; WithClock passes the time as
//     an argument instead (tests on fake time).
//
//   - Atomicity and round trips. On a standalone or Sentinel-managed Redis a
//     Take is ONE EVALSHA whatever the number of buckets: the script checks
//     every bucket and then charges all of them or none. Scripts are loaded
//     at New; a NOSCRIPT reply (after SCRIPT FLUSH, a restart or a failover)
//     is answered by re-sending the script with EVAL, which also reloads
//     it, so the request does not fail.
//
//   - Redis Cluster. Keys are the prefix (default none: tiers.Limiter
//     already starts every bucket key with its own namespace, "fg:"; the
//     prefix must not contain '{' or '}') followed by the bucket key, so the slot is chosen
//     by the bucket key's own hash tag, never by the prefix. Buckets are
//     grouped by slot; a take whose buckets share a slot is one script call.
//     A take spanning several slots runs one script per slot, in parallel;
//     if any slot denies, every slot that charged is refunded by refund.lua.
//     The net effect is all or nothing, with this weaker consistency than
//     the single-slot case: between a slot's charge and its refund (one
//     round trip) a concurrent take can see the charged units and be denied
//     by them; it can never be admitted because of them, so limits are
//     never exceeded, only briefly under-used. A refund that fails (the
//     node went away) is reported as the Take's error. No CROSSSLOT error can
//     reach a caller.
//
//   - Expiry. Every key has a TTL at least as long as the Algorithm doc's,
//     and at least DefaultMinTTL (WithMinTTL), so idle buckets vanish; with
//     Redis time the TTL is set only when the state needs a later deadline
//     than the key has (see WithMinTTL).
//
//   - Over-limit cache. A bucket with CacheDenials set that denied is
//     answered locally ("still denied", Source floodgate.SourceCache, the
//     other buckets of the take reported Allowed and unconsulted) until its
//     retry-after passes on the store's clock, for the same or a larger
//     cost. Entries are keyed by bucket key AND limit, so a changed limit
//     never inherits a stale denial. The cache is bounded
//     (DefaultDenialCacheSize unless WithDenialCache says otherwise; 0 turns
//     it off) and its hits are counted (CacheHits): each hit is a Redis call
//     saved.
//
//   - Client-side batching (WithBatching, standalone and Sentinel only):
//     the takes of concurrent callers go out as ONE take.lua call that
//     decides them in order, each all or nothing, exactly as if each were
//     its own call (a take with a sliding window log bucket goes as its
//     own call in the same pipeline). Each script call costs Redis far more
//     than a bucket does, so this cuts Redis CPU per decision by about a
//     third at 4 levels and two thirds at 1 (see BenchmarkTake), and client
//     CPU too; it is off by default because a lone caller gains nothing.
//
//   - Redis version: 6.2 or later (take.lua uses SET ... GET).
package redisstore

import (
	"context"
	"crypto/sha1"
	_ "embed"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/tiers"
)

//go:embed take.lua
var takeSrc string

//go:embed refund.lua
var refundSrc string

// DefaultPrefix is the key prefix used unless WithPrefix says otherwise:
// none, because the bucket keys tiers.Limiter builds already start with their
// own namespace ("fg:" unless tiers.WithKeyPrefix says otherwise).
const DefaultPrefix = ""

// script is a Lua script with its SHA1, both pre-boxed so that building a
// command's arguments allocates nothing for them.
type script struct {
	src    string
	sha    string
	srcArg any
	shaArg any
}

func newScript(src string) script {
	h := sha1.Sum([]byte(src))
	sha := hex.EncodeToString(h[:])
	return script{src: src, sha: sha, srcArg: src, shaArg: sha}
}

var (
	takeScript   = newScript(takeSrc)
	refundScript = newScript(refundSrc)
)

// usec converts script microseconds to a Duration.
func usec(v int64) time.Duration {
	if v > math.MaxInt64/int64(time.Microsecond) {
		return math.MaxInt64 // saturate, as memstore does; take.lua caps at 2^62 µs
	}
	return time.Duration(v) * time.Microsecond
}

// Store is a tiers.Store over Redis. It is safe for concurrent use.
type Store struct {
	client        redis.UniversalClient
	cluster       *redis.ClusterClient // non-nil when client is a cluster client
	clock         floodgate.Clock      // nil: the scripts read Redis TIME
	prefix        string
	minTTL        time.Duration
	minArg        []byte // minTTL in ms, as text
	refundTimeout time.Duration
	batchFlushers int
	batchMax      int

	cache *denialCache // nil when disabled
	batch *batcher     // nil unless WithBatching

	pool sync.Pool // *call
}

// Option configures a Store.
type Option func(*Store) error

// WithClock makes the scripts take the time from c (passed as an argument)
// instead of Redis TIME, and times the over-limit cache by c too. Meant for
// tests on fake time; in production every pod should use Redis TIME so that
// skewed clocks agree. Key TTLs still run in Redis's real time, so pair a
// fake clock with WithMinTTL (a minute, say) lest a key expire while fake
// time stands still.
func WithClock(c floodgate.Clock) Option {
	return func(s *Store) error {
		if c == nil {
			return errors.New("redisstore: WithClock: nil clock")
		}
		s.clock = c
		return nil
	}
}

// WithPrefix sets the string put before every bucket key (default none), for
// example to keep two deployments sharing one Redis apart.
// It must not contain '{' or '}', so that it can never become or change a
// key's Redis Cluster hash tag.
func WithPrefix(p string) Option {
	return func(s *Store) error {
		if strings.ContainsAny(p, "{}") {
			return fmt.Errorf("redisstore: WithPrefix(%q): prefix must not contain '{' or '}' (it would change cluster hash tags)", p)
		}
		s.prefix = p
		return nil
	}
}

// WithDenialCache sets the capacity of the local over-limit cache used for
// buckets with CacheDenials set (default DefaultDenialCacheSize); 0
// disables the cache, so every take goes to Redis.
func WithDenialCache(max int) Option {
	return func(s *Store) error {
		if max < 0 {
			return fmt.Errorf("redisstore: WithDenialCache(%d): max entries must not be negative", max)
		}
		if max == 0 {
			s.cache = nil
			return nil
		}
		s.cache = newDenialCache(max)
		return nil
	}
}

// DefaultMinTTL is the least TTL a key is given unless WithMinTTL says
// otherwise.
//
// A bucket's state needs its key only until it reads the same as no state
// (a token bucket refilled, a window passed), which for a busy key is often
// a millisecond or two. Keys that short-lived cost Redis a new key and an
// expiry on nearly every decision, and its active expiry cycle shows as
// latency spikes; with a floor of a second (as redis_rate's whole-second
// TTLs give) a busy key is updated in place, and its TTL is set about once
// a second rather than on every write. Idle buckets still vanish within
// two seconds.
const DefaultMinTTL = time.Second

// WithMinTTL sets the least TTL a key is given (default DefaultMinTTL; at
// least 1ms). With Redis time (no WithClock), a key's TTL is set to a
// deadline min TTL beyond what its state needs, recorded in the state, and
// writes that deadline still covers keep the TTL (SET KEEPTTL): so keys
// live up to twice the min TTL beyond need. TTLs only collect idle state;
// the floor never changes a decision. Tests on a fake clock raise it so
// that keys do not expire in real time while fake time stands still.
func WithMinTTL(d time.Duration) Option {
	return func(s *Store) error {
		if d < time.Millisecond {
			return fmt.Errorf("redisstore: WithMinTTL(%s): must be at least 1ms", d)
		}
		s.minTTL = d
		return nil
	}
}

// WithBatching sends the takes of concurrent callers together: up to
// flushers calls in flight at once, each carrying up to max takes that were
// waiting when it left, as ONE take.lua call that decides them in order,
// each all or nothing, exactly as separate calls would (a take with a
// sliding window log bucket goes as its own call in the same pipeline).
// NOSCRIPT is handled for the whole call. A lone take is sent at once, so
// batching adds no latency when idle; under load a take waits for the
// call ahead of it, so leave room for that in a per-call budget such as
// fallback.WithTimeout. It starts flushers goroutines, stopped by Close.
// Not available on Redis Cluster (New returns an error). BenchmarkTake
// shows what it pays; WithBatching(4, 64) is what it measures, and
// WithBatching(2, 64) what the bench/ module runs.
func WithBatching(flushers, max int) Option {
	return func(s *Store) error {
		if flushers < 1 || max < 1 {
			return fmt.Errorf("redisstore: WithBatching(%d, %d): flushers and max must be at least 1", flushers, max)
		}
		s.batchFlushers, s.batchMax = flushers, max
		return nil
	}
}

// WithRefundTimeout bounds the refund of a multi-slot cluster take that was
// denied (default 1s). Refunds run even when the caller's context is
// already cancelled.
func WithRefundTimeout(d time.Duration) Option {
	return func(s *Store) error {
		if d <= 0 {
			return fmt.Errorf("redisstore: WithRefundTimeout(%s): must be positive", d)
		}
		s.refundTimeout = d
		return nil
	}
}

// New returns a Store over client, which may be a *redis.Client (standalone
// or, through redis.NewFailoverClient, Sentinel) or a *redis.ClusterClient.
// It loads the scripts (on every master of a cluster) with a short timeout;
// a failure to load is not an error, because the store reloads them on
// NOSCRIPT, so a service can start while Redis is still coming up.
func New(client redis.UniversalClient, opts ...Option) (*Store, error) {
	if client == nil {
		return nil, errors.New("redisstore: New: nil client")
	}
	s := &Store{client: client, prefix: DefaultPrefix, minTTL: DefaultMinTTL, refundTimeout: time.Second,
		cache: newDenialCache(DefaultDenialCacheSize)}
	switch c := client.(type) {
	case *redis.ClusterClient:
		s.cluster = c
	case *redis.Ring:
		return nil, errors.New("redisstore: New: *redis.Ring is not supported: a take's keys may live on different shards and a Ring cannot run one script over them; use a Client, FailoverClient or ClusterClient")
	}
	for i, o := range opts {
		if o == nil {
			return nil, fmt.Errorf("redisstore: New: option %d is nil", i)
		}
		if err := o(s); err != nil {
			return nil, err
		}
	}
	s.minArg = strconv.AppendInt(nil, int64((s.minTTL+time.Millisecond-1)/time.Millisecond), 10)
	s.pool.New = func() any { return new(call) }
	if s.batchFlushers > 0 {
		if s.cluster != nil {
			return nil, errors.New("redisstore: WithBatching is not supported on Redis Cluster")
		}
		s.batch = newBatcher(s, s.batchFlushers, s.batchMax)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	_ = s.LoadScripts(ctx)
	return s, nil
}

// LoadScripts loads the store's scripts into Redis (every master of a
// cluster). Take does this by itself on NOSCRIPT; calling it after a
// failover only saves the first request the extra round trip.
func (s *Store) LoadScripts(ctx context.Context) error {
	load := func(ctx context.Context, c *redis.Client) error {
		for _, sc := range []script{takeScript, refundScript} {
			if err := c.ScriptLoad(ctx, sc.src).Err(); err != nil {
				return fmt.Errorf("redisstore: SCRIPT LOAD on %s: %w", c.Options().Addr, err)
			}
		}
		return nil
	}
	if s.cluster != nil {
		return s.cluster.ForEachMaster(ctx, load)
	}
	if c, ok := s.client.(*redis.Client); ok {
		return load(ctx, c)
	}
	for _, sc := range []script{takeScript, refundScript} {
		if err := s.client.ScriptLoad(ctx, sc.src).Err(); err != nil {
			return fmt.Errorf("redisstore: SCRIPT LOAD: %w", err)
		}
	}
	return nil
}

var errClosed = errors.New("redisstore: store is closed")

// Close stops the batching goroutines started by WithBatching; Takes after
// Close that would be batched fail. It does not close the Redis client,
// which the caller owns. Close without WithBatching does nothing.
func (s *Store) Close() error {
	if s.batch != nil {
		s.batch.close()
	}
	return nil
}

// CacheHits returns how many bucket decisions the over-limit cache
// answered without Redis (each a Take that made no Redis call).
func (s *Store) CacheHits() int64 {
	if s.cache == nil {
		return 0
	}
	return s.cache.hits.Load()
}

// CacheLen returns the number of entries in the over-limit cache.
func (s *Store) CacheLen() int {
	if s.cache == nil {
		return 0
	}
	return s.cache.len()
}

func (s *Store) now() time.Time {
	if s.clock != nil {
		return s.clock.Now()
	}
	return time.Now()
}

// Take implements tiers.Store: it charges every bucket its cost if and only
// if every bucket allows it. See the package doc for the round trips and the
// consistency on Redis Cluster.
func (s *Store) Take(ctx context.Context, buckets []tiers.Bucket, res []tiers.Result) (bool, error) {
	if err := validate(buckets, res); err != nil {
		return false, err
	}
	if len(buckets) == 0 {
		return true, nil
	}
	if s.cache != nil {
		if s.cache.answer(s.now(), buckets, res) {
			return false, nil
		}
	}
	var (
		allowed bool
		err     error
	)
	if s.cluster == nil {
		allowed, err = s.takeOne(ctx, buckets, nil, res, false)
	} else {
		allowed, err = s.takeCluster(ctx, buckets, res)
	}
	if err != nil {
		return false, err
	}
	if s.cache != nil && !allowed {
		s.cache.record(s.now(), buckets, res)
	}
	return allowed, nil
}

func validate(buckets []tiers.Bucket, res []tiers.Result) error {
	if len(res) < len(buckets) {
		return fmt.Errorf("redisstore: Take: len(res) = %d < len(buckets) = %d", len(res), len(buckets))
	}
	for i := range buckets {
		b := &buckets[i]
		if b.Key == "" {
			return fmt.Errorf("redisstore: Take: bucket %d has an empty key", i)
		}
		if err := b.Limit.Validate(); err != nil {
			return fmt.Errorf("redisstore: Take: bucket %d (%q): %w", i, b.Key, err)
		}
		if b.Cost < 0 {
			return fmt.Errorf("redisstore: Take: bucket %d (%q): negative cost %d", i, b.Key, b.Cost)
		}
		for j := 0; j < i; j++ {
			if buckets[j].Key == b.Key {
				return fmt.Errorf("redisstore: Take: bucket key %q appears twice (buckets %d and %d)", b.Key, j, i)
			}
		}
	}
	return nil
}

// isNoScript reports whether err is Redis's NOSCRIPT error.
func isNoScript(err error) bool {
	return err != nil && strings.HasPrefix(err.Error(), "NOSCRIPT")
}

// takeOne runs take.lua once over buckets (or the subset idx of them, all in
// one slot) and fills res. With pre, it also keeps the pre-charge values (in
// the returned call) for a possible refund.
func (s *Store) takeOne(ctx context.Context, buckets []tiers.Bucket, idx []int, res []tiers.Result, pre bool) (bool, error) {
	c := s.pool.Get().(*call)
	defer s.release(c)
	allowed, _, err := s.runTake(ctx, c, buckets, idx, res, pre)
	return allowed, err
}

func (s *Store) release(c *call) {
	if c.abandoned {
		return
	}
	c.reset()
	s.pool.Put(c)
}

// runTake builds and sends take.lua for the buckets named by idx (all when
// idx is nil), retrying once with EVAL on NOSCRIPT, and writes their
// results. It returns whether the script charged, and the time it used.
func (s *Store) runTake(ctx context.Context, c *call, buckets []tiers.Bucket, idx []int, res []tiers.Result, pre bool) (bool, int64, error) {
	if s.clock != nil {
		c.now, c.fixed = s.clock.Now().UnixMicro(), true
	}
	c.build(takeScript, s.prefix, buckets, idx, pre, s.minArg, s.cluster != nil)
	n := c.n
	var (
		now int64
		seg []int64 // the take's part of the reply
		err error
	)
	switch {
	case pre:
		now, seg, err = s.evalPre(ctx, c, n)
	case s.batch != nil:
		now, seg, err = s.batch.do(ctx, c)
	default:
		if seg, err = s.eval(ctx, c); err == nil {
			now, seg, err = splitNow(seg)
		}
	}
	if err != nil {
		return false, 0, err
	}
	per, err := takePart(seg, n, pre)
	if err != nil {
		return false, 0, err
	}
	for j := 0; j < n; j++ {
		i := j
		if idx != nil {
			i = idx[j]
		}
		b := bucketAt(seg, per, j)
		r := &res[i]
		r.Allowed = b.allowed
		r.Limit = buckets[i].Limit.Capacity()
		r.Remaining = b.remaining
		r.Reset = usec(b.reset)
		if b.retry < 0 {
			r.RetryAfter = tiers.Never
		} else {
			r.RetryAfter = usec(b.retry)
		}
		r.Source = floodgate.SourceStore
		if pre {
			c.pre = append(c.pre, b.remaining0, b.reset0)
		}
	}
	return seg[0] == 1, now, nil
}

// evalPre runs take.lua in mode "p", whose reply mixes integers and the
// buckets' raw states: it returns the time the script used and the take's
// integers (the charged flag, then 6 per bucket), and keeps the states,
// before and after, in c.states for a refund.
func (s *Store) evalPre(ctx context.Context, c *call, n int) (int64, []int64, error) {
	cmd := redis.NewSliceCmd(ctx, c.args...)
	cmd.SetFirstKeyPos(3)
	err := s.client.Process(ctx, cmd)
	if isNoScript(err) {
		c.args[0], c.args[1] = "eval", takeScript.srcArg
		cmd = redis.NewSliceCmd(ctx, c.args...)
		cmd.SetFirstKeyPos(3)
		err = s.client.Process(ctx, cmd)
	}
	if err != nil {
		return 0, nil, fmt.Errorf("redisstore: %w", err)
	}
	raw := cmd.Val()
	ints := 2 + 6*n
	if len(raw) != ints+2*n {
		return 0, nil, fmt.Errorf("redisstore: take.lua replied %d values for %d buckets in mode p", len(raw), n)
	}
	vals := make([]int64, ints)
	for j, v := range raw {
		if j >= ints {
			str, ok := v.(string)
			if !ok {
				return 0, nil, fmt.Errorf("redisstore: take.lua replied %T for a state", v)
			}
			c.states = append(c.states, str)
			continue
		}
		iv, ok := v.(int64)
		if !ok {
			return 0, nil, fmt.Errorf("redisstore: take.lua replied %T for a number", v)
		}
		vals[j] = iv
	}
	return vals[0], vals[1:], nil
}

// eval sends the take.lua call in c by EVALSHA and, on NOSCRIPT, once more
// by EVAL (which also caches the script on that server), and returns its
// reply.
func (s *Store) eval(ctx context.Context, c *call) ([]int64, error) {
	cmd := redis.NewIntSliceCmd(ctx, c.args...)
	if s.cluster != nil {
		cmd.SetFirstKeyPos(3)
	}
	err := s.client.Process(ctx, cmd)
	if isNoScript(err) {
		c.args[0], c.args[1] = "eval", takeScript.srcArg
		cmd = redis.NewIntSliceCmd(ctx, c.args...)
		if s.cluster != nil {
			cmd.SetFirstKeyPos(3)
		}
		err = s.client.Process(ctx, cmd)
	}
	if err != nil {
		return nil, fmt.Errorf("redisstore: %w", err)
	}
	return cmd.Val(), nil
}
