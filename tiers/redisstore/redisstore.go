package redisstore

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"math"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/internal/failover"
	"github.com/floodgate-go/floodgate/quota"
)

//go:embed take.lua
var takeSrc string

//go:embed refund.lua
var refundSrc string

// logSrc is log.lua, the sliding window log's entries added and removed,
// which take.lua, settle.lua and report.lua share.
//
//go:embed log.lua
var logSrc string

var (
	takeScript   = newScript(takeHead, logSrc, takeSrc)
	nodeScript   = newNodeScript(logSrc + takeSrc)
	refundScript = newScript(refundSrc)
)

// usec converts script microseconds to a Duration.
func usec(v int64) time.Duration {
	if v > math.MaxInt64/int64(time.Microsecond) {
		return math.MaxInt64 // saturate, as memstore does; take.lua caps at 2^62 µs
	}
	return time.Duration(v) * time.Microsecond
}

// Store is a quota.Store over Redis. It is safe for concurrent use.
type Store struct {
	client     redis.UniversalClient
	cluster    *redis.ClusterClient // non-nil when client is a cluster client
	clock      floodgate.Clock      // nil: the scripts read Redis TIME
	cacheClock floodgate.Clock      // times the over-limit cache: clock, or the system clock
	prefix     string
	minArg     []byte // the min TTL in ms, as text

	cache *denialCache // nil when disabled
	batch *batcher     // nil when batching is off (WithBatching(0, 0))

	// retry sends failed refunds of multi-slot cluster takes again; their
	// marker keys are named by refundBase and refundSeq.
	retry      *retrier
	refundBase uint64
	refundSeq  atomic.Uint64
	// beforeRefund, when set (tests), runs before the refunds of a denied
	// multi-slot take are sent.
	beforeRefund func()
	// noNodeReport is set once a master could not run reportNodeScript
	// (Redis older than 7): reports then go one call per slot.
	noNodeReport atomic.Bool

	pool sync.Pool // *call
}

// Option configures a Store; New reports every bad one.
type Option func(*config)

type config struct {
	clock         floodgate.Clock
	prefix        string
	denialCache   int
	minTTL        time.Duration
	batchFlushers int
	batchMax      int
	errs          []error
}

func (c *config) fail(format string, args ...any) {
	c.errs = append(c.errs, fmt.Errorf("redisstore: "+format, args...))
}

// WithClock makes the scripts take the time from c (passed as an argument)
// instead of Redis TIME, and times the over-limit cache by c too. Meant for
// tests on fake time; in production every pod should use Redis TIME so that
// skewed clocks agree. Key TTLs still run in Redis's real time, so pair a
// fake clock with WithMinTTL (a minute, say) lest a key expire while fake
// time stands still.
func WithClock(c floodgate.Clock) Option {
	return func(cfg *config) {
		if c == nil {
			cfg.fail("WithClock: clock is nil")
			return
		}
		cfg.clock = c
	}
}

// WithPrefix sets the string put before every bucket key (default none:
// the bucket keys tiers.Limiter builds already start with their own
// namespace, "fg:" unless tiers.WithKeyPrefix says otherwise), for example
// to keep two deployments sharing one Redis apart. It must not contain '{'
// or '}', so that it can never become or change a key's Redis Cluster hash
// tag.
func WithPrefix(p string) Option {
	return func(cfg *config) {
		if strings.ContainsAny(p, "{}") {
			cfg.fail("WithPrefix: prefix %q must not contain '{' or '}' (it would change cluster hash tags)", p)
			return
		}
		cfg.prefix = p
	}
}

// WithDenialCache sets the capacity of the local over-limit cache used for
// buckets with CacheDenials set (default 10 000 denials); 0
// disables the cache, so every take goes to Redis.
func WithDenialCache(max int) Option {
	return func(cfg *config) {
		if max < 0 {
			cfg.fail("WithDenialCache: size %d must be >= 0", max)
			return
		}
		cfg.denialCache = max
	}
}

// defaultMinTTL is the least TTL a key is given unless WithMinTTL says
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
const defaultMinTTL = time.Second

// WithMinTTL sets the least TTL a key is given (default 1s, so that a busy
// key is updated in place rather than created and expired on nearly every
// decision; at least 1ms). With Redis time (no WithClock), a key's TTL is set to a
// deadline min TTL beyond what its state needs, recorded in the state, and
// writes that deadline still covers keep the TTL (SETRANGE, or SET
// KEEPTTL): so keys live up to twice the min TTL beyond need. TTLs only
// collect idle state; the floor never changes a decision. Tests on a fake
// clock raise it so that keys do not expire in real time while fake time
// stands still.
func WithMinTTL(d time.Duration) Option {
	return func(cfg *config) {
		if d < time.Millisecond {
			cfg.fail("WithMinTTL: %s must be >= 1ms", d)
			return
		}
		cfg.minTTL = d
	}
}

// Client-side batching is on by default (see WithBatching), with these
// settings.
const (
	defaultBatchFlushers = 2
	defaultBatchMax      = 64
)

// WithBatching sets how the takes of concurrent callers are sent together
// (default WithBatching(2, 64)): up to flushers pipelines
// in flight at once, each carrying up to max takes that were waiting when
// it left, the takes of each cluster master (all of them, on a standalone or
// Sentinel-managed Redis) as ONE take.lua call that decides them in order,
// each all or nothing, exactly as separate calls would (a take with a
// sliding window log bucket, or alone on its master, goes as its own call
// in the same pipeline; a take whose buckets span cluster slots sends its
// per-slot parts, and its refunds, in the same pipelines, the parts merged
// per master likewise). NOSCRIPT is handled for the whole call. A lone take is sent at
// once, as its own call, so batching adds no round trip when idle; under
// load a take waits for the call ahead of it, so leave room for that in a
// per-call budget such as fallback.WithTimeout. The store runs flushers
// goroutines, stopped by Close.
//
// WithBatching(0, 0) turns batching off: every take is its own call, sent
// by the caller's goroutine, and Close has nothing to stop. Otherwise both
// arguments must be at least 1. What batching saves is measured by
// BenchmarkTake (its parallel-default rows, and parallel-batched with
// WithBatching(4, 64)), BenchmarkTakeCluster (one-slot against
// one-slot/unbatched) and the bench/ module; see bench/README.md.
func WithBatching(flushers, max int) Option {
	return func(cfg *config) {
		if (flushers < 1 || max < 1) && (flushers != 0 || max != 0) {
			cfg.fail("WithBatching: flushers %d and max %d must both be >= 1, or both 0 to turn batching off", flushers, max)
			return
		}
		cfg.batchFlushers, cfg.batchMax = flushers, max
	}
}

// undoTimeout bounds the first sending of the refunds (refund.lua) of a
// multi-slot cluster take that was denied, which the caller waits for,
// and each background retry (see retrier). The undo runs even when the
// caller's context is already cancelled.
const undoTimeout = time.Second

// errNoContextTimeout is why New refuses a client that ignores deadlines.
const errNoContextTimeout = "the client's ContextTimeoutEnabled is false, so go-redis would ignore the per-call deadline (fallback's timeout) and wait for its own ReadTimeout on a slow Redis: build the client with redisstore.NewClient(url), or set redis.Options.ContextTimeoutEnabled (and DialerRetries 1)"

// New returns a Store over client, which may be a *redis.Client (standalone
// or, through redis.NewFailoverClient, Sentinel) or a *redis.ClusterClient,
// or an error naming every bad option. It loads the scripts (on every
// master of a cluster) with a short timeout; a failure to load is not an
// error, because the store reloads them on NOSCRIPT, so a service can start
// while Redis is still coming up.
//
// Unless WithBatching(0, 0) turns batching off, the Store runs goroutines
// that send batched takes: call Close when done with it. (A Store dropped
// without Close stops them when it is garbage collected.)
//
// New refuses a client built without redis.Options.ContextTimeoutEnabled:
// such a client ignores the deadline of the call's context, so the
// fallback's per-call budget would not bound a call to a slow Redis.
// NewClient builds one with the right settings from a URL.
func New(client redis.UniversalClient, opts ...Option) (*Store, error) {
	cfg := config{denialCache: defaultDenialCacheSize, minTTL: defaultMinTTL,
		batchFlushers: defaultBatchFlushers, batchMax: defaultBatchMax}
	var cluster *redis.ClusterClient
	switch c := client.(type) {
	case nil:
		cfg.fail("client is nil")
	case *redis.ClusterClient:
		cluster = c
		if !c.Options().ContextTimeoutEnabled {
			cfg.fail("%s", errNoContextTimeout)
		}
	case *redis.Client:
		if !c.Options().ContextTimeoutEnabled {
			cfg.fail("%s", errNoContextTimeout)
		}
	case *redis.Ring:
		cfg.fail("*redis.Ring is not supported: a take's keys may live on different shards and a Ring cannot run one script over them; use a Client, FailoverClient or ClusterClient")
	}
	for _, o := range opts {
		if o == nil {
			cfg.fail("nil Option")
			continue
		}
		o(&cfg)
	}
	if len(cfg.errs) > 0 {
		return nil, errors.Join(cfg.errs...)
	}
	s := &Store{client: client, cluster: cluster, clock: cfg.clock, cacheClock: cfg.clock, prefix: cfg.prefix}
	if s.cacheClock == nil {
		s.cacheClock = floodgate.SystemClock()
	}
	if cfg.denialCache > 0 {
		s.cache = newDenialCache(cfg.denialCache)
	}
	s.minArg = strconv.AppendInt(nil, int64((cfg.minTTL+time.Millisecond-1)/time.Millisecond), 10)
	s.pool.New = func() any { return new(call) }
	s.retry, s.refundBase = newRetrier(client, s.keyPos()), newRefundBase()
	if cfg.batchFlushers > 0 {
		s.batch = newBatcher(client, s.keyPos(), cfg.batchFlushers, cfg.batchMax)
		// The flushers hold the batcher, not s: if s is dropped without
		// Close, this stops them.
		runtime.AddCleanup(s, func(b *batcher) { b.stop() }, s.batch)
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
		for _, sc := range []script{takeScript, refundScript, settleScript, reportScript} {
			if err := c.ScriptLoad(ctx, sc.src).Err(); err != nil {
				return fmt.Errorf("redisstore: SCRIPT LOAD on %s: %w", c.Options().Addr, err)
			}
		}
		return nil
	}
	if s.cluster != nil {
		return s.cluster.ForEachMaster(ctx, func(ctx context.Context, c *redis.Client) error {
			if err := load(ctx, c); err != nil {
				return err
			}
			// nodeScript and reportNodeScript need Redis 7 (script
			// flags); older masters fail to load them, and the batcher
			// then merges by slot, reports go per slot.
			_ = c.ScriptLoad(ctx, nodeScript.src).Err()
			_ = c.ScriptLoad(ctx, reportNodeScript.src).Err()
			return nil
		})
	}
	if c, ok := s.client.(*redis.Client); ok {
		return load(ctx, c)
	}
	for _, sc := range []script{takeScript, nodeScript, refundScript, settleScript, reportScript, reportNodeScript} {
		if err := s.client.ScriptLoad(ctx, sc.src).Err(); err != nil {
			return fmt.Errorf("redisstore: SCRIPT LOAD: %w", err)
		}
	}
	return nil
}

var errClosed = errors.New("redisstore: store is closed")

// Shared reports true: the buckets live in Redis, shared by every process
// that uses it, so a fallback guarding this store needs the number of
// those processes (fallback.WithInstances), and warns without it.
func (s *Store) Shared() bool { return true }

// Close stops the batching goroutines (see WithBatching), after sending
// the takes already queued, and drops the refunds of multi-slot cluster
// takes still being retried (see the package doc); Takes after Close that would be batched fail
// with an error saying the store is closed (Settle and Report are never
// batched). It does not close the Redis client, which the caller owns.
// Close is idempotent; with batching off it does nothing.
func (s *Store) Close() error {
	s.retry.close()
	if s.batch != nil {
		s.batch.close()
	}
	return nil
}

// now is the time of the over-limit cache.
func (s *Store) now() time.Time { return s.cacheClock.Now() }

// Take implements quota.Store: it charges every bucket its cost if and only
// if every bucket allows it. See the package doc for the round trips and the
// consistency on Redis Cluster.
func (s *Store) Take(ctx context.Context, buckets []quota.Bucket, res []quota.Result) (bool, error) {
	if err := quota.ValidateTake(buckets, res); err != nil {
		return false, err
	}
	if len(buckets) == 0 {
		return true, nil
	}
	var (
		allowed bool
		err     error
		sent    time.Time
		gen     uint64
	)
	if s.cache != nil {
		sent, gen = s.now(), s.cache.gen.Load()
		if s.cache.answer(sent, buckets, res) {
			return false, nil
		}
	}
	switch {
	case s.cluster == nil:
		allowed, err = s.takeOne(ctx, buckets, 0, res)
	case s.spreadPartial(buckets):
		allowed, err = s.takePartialSpread(ctx, buckets, res)
	default:
		allowed, err = s.takeCluster(ctx, buckets, res)
	}
	if err != nil {
		return false, err
	}
	if s.cache != nil && !allowed {
		s.cache.record(sent, gen, buckets, res)
	}
	return allowed, nil
}

// keysAt is the position of a script call's first key: EVALSHA sha numkeys
// key... (a cluster client routes by it).
const keysAt = 3

// keyPos is the first-key position to give a script command: keysAt on a
// cluster, where the client routes by it, else 0 (leave it to go-redis).
func (s *Store) keyPos() int8 {
	if s.cluster != nil {
		return keysAt
	}
	return 0
}

// once is a script command go-redis must not send again after a failure:
// a script that ran and whose reply was lost (a read timeout, a connection
// dropped after the write) has charged, and running it again would charge
// twice, whatever the client's MaxRetries. (go-redis asks NoRetry before
// the command holds its error, so it cannot tell those failures from
// refusals; runScript and the batcher send refused calls again
// themselves, see refused.) Cluster redirections (MOVED, ASK) go-redis
// follows without asking: the script did not run where it was sent.
type once struct{ redis.Cmder }

// NoRetry implements redis.Cmder.
func (once) NoRetry() bool { return true }

// The reply types the scripts use, wrapped as once is but in one pointer,
// which an interface holds without an allocation.
type (
	onceIntSlice struct{ *redis.IntSliceCmd }
	onceInt      struct{ *redis.IntCmd }
	onceCmd      struct{ *redis.Cmd }
)

func (onceIntSlice) NoRetry() bool { return true }
func (onceInt) NoRetry() bool      { return true }
func (onceCmd) NoRetry() bool      { return true }

// noRetry returns cmd wrapped so that go-redis never sends it again after
// a failure (see once).
func noRetry(cmd redis.Cmder) redis.Cmder {
	switch c := cmd.(type) {
	case *redis.IntSliceCmd:
		return onceIntSlice{c}
	case *redis.IntCmd:
		return onceInt{c}
	case *redis.Cmd:
		return onceCmd{c}
	}
	return once{cmd}
}

// refused reports whether err is TRYAGAIN: Redis Cluster refused a
// multi-key call, before running it, while the slot of its keys moves
// (some keys moved, some not), so sending it again is its first run; the
// Cluster client used to send it again through its redirections. Other
// refusals (LOADING, CLUSTERDOWN, a connection never made) fail the call
// at once, as with NewClient's client, so the fallback decides without
// waiting.
func refused(err error) bool {
	var reply redis.Error
	return errors.As(err, &reply) && strings.HasPrefix(reply.Error(), "TRYAGAIN")
}

// maxRefused is how many times a refused script call is sent again, after
// refusedBackoff, doubling.
const (
	maxRefused     = 4
	refusedBackoff = 8 * time.Millisecond
)

// backoff waits before the attempt-th sending again of a refused call (1
// is the first); it reports false when ctx ended first.
func backoff(ctx context.Context, attempt int) bool {
	t := time.NewTimer(refusedBackoff << (attempt - 1))
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// runScript sends the script call laid out in c by EVALSHA and, when the
// server answers NOSCRIPT (its script cache was emptied: nothing ran), once
// more by EVAL with sc's source, which also caches the script there; a
// call Redis refused (see refused) goes again, up to maxRefused times; a
// call that failed otherwise never goes again (see once). newCmd builds the
// command for the reply's type; keyPos, when not 0, is where its keys
// start.
func runScript[C redis.Cmder](ctx context.Context, client redis.UniversalClient, c *call, sc script, keyPos int8, newCmd func(context.Context, ...any) C) (C, error) {
	send := func() (C, error) {
		cmd := newCmd(ctx, c.args...)
		if keyPos != 0 {
			cmd.SetFirstKeyPos(keyPos)
		}
		return cmd, client.Process(ctx, noRetry(cmd))
	}
	cmd, err := send()
	for attempt := 1; ; attempt++ {
		if isNoScript(err) {
			c.args[0], c.args[1] = "eval", sc.srcArg
		} else if !refused(err) || attempt > maxRefused || !backoff(ctx, attempt) {
			failover.Follow(client, err)
			return cmd, err
		}
		cmd, err = send()
	}
}

// runScripts sends the script calls cs (each running c.script()) in one
// pipeline, which a cluster client splits by master (one round trip per
// master, not one per call), and returns each call's command and error.
// A call answered NOSCRIPT (it did not run) goes again by EVAL, and one
// refused while its slot moves (TRYAGAIN) goes again, each on its own
// through runScript (which backs off between refusals); no other failure
// is sent again (see once). A single call goes on its own.
func runScripts[C redis.Cmder](ctx context.Context, client redis.UniversalClient, cs []*call, keyPos int8, newCmd func(context.Context, ...any) C) ([]C, []error) {
	cmds := make([]C, len(cs))
	errs := make([]error, len(cs))
	if len(cs) == 1 {
		cmds[0], errs[0] = runScript(ctx, client, cs[0], cs[0].script(), keyPos, newCmd)
		return cmds, errs
	}
	pipe := client.Pipeline()
	for j, c := range cs {
		cmds[j] = newCmd(ctx, c.args...)
		if keyPos != 0 {
			cmds[j].SetFirstKeyPos(keyPos)
		}
		_ = pipe.Process(ctx, noRetry(cmds[j]))
	}
	_, _ = pipe.Exec(ctx)
	followed := false
	for j, c := range cs {
		err := cmds[j].Err()
		switch {
		case isNoScript(err) || refused(err):
			sc := c.script()
			if isNoScript(err) {
				c.args[0], c.args[1] = "eval", sc.srcArg
			}
			cmds[j], err = runScript(ctx, client, c, sc, keyPos, newCmd)
		case err != nil && !followed:
			followed = true
			failover.Follow(client, err)
		}
		errs[j] = err
	}
	return cmds, errs
}

// isNoScript reports whether err is Redis's NOSCRIPT error.
func isNoScript(err error) bool {
	return err != nil && strings.HasPrefix(err.Error(), "NOSCRIPT")
}

// takeOne runs take.lua once over buckets, all in one slot (0 on a
// standalone Redis), and fills res; batched unless batching is off.
func (s *Store) takeOne(ctx context.Context, buckets []quota.Bucket, slot int, res []quota.Result) (bool, error) {
	c := s.pool.Get().(*call)
	defer s.release(c)
	c.slot = slot
	allowed, _, err := s.runTake(ctx, c, buckets, nil, res, false)
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
func (s *Store) runTake(ctx context.Context, c *call, buckets []quota.Bucket, idx []int, res []quota.Result, pre bool) (bool, int64, error) {
	s.buildTake(c, buckets, idx, pre)
	var (
		now int64
		seg []int64 // the take's part of the reply
		err error
	)
	switch {
	case pre:
		now, seg, err = s.evalPre(ctx, c, c.n)
	case s.batch != nil:
		now, seg, err = s.batch.do(ctx, c)
		// s must not be collected (which stops the batcher) while a take
		// of it waits there.
		runtime.KeepAlive(s)
	default:
		if seg, err = s.eval(ctx, c); err == nil {
			now, seg, err = splitNow(seg)
		}
	}
	if err != nil {
		if c.sent != nil {
			s.answerLate(ctx, c.sent, buckets, idx)
		}
		return false, 0, err
	}
	allowed, err := decodeTake(seg, c.n, buckets, idx, res, pre, c)
	return allowed, now, err
}

// buildTake lays out in c the take.lua call of the buckets named by idx
// (all when idx is nil), in mode "p" when pre.
func (s *Store) buildTake(c *call, buckets []quota.Bucket, idx []int, pre bool) {
	if s.clock != nil {
		c.now, c.fixed = s.clock.Now().UnixMicro(), true
	}
	c.build(takeScript, s.prefix, buckets, idx, pre, s.minArg, s.cluster != nil)
	if pre {
		c.kind = kindPre
	}
}

// decodeTake writes the results of a take.lua reply (seg, the take's part
// of it) for the n buckets named by idx (all when idx is nil) and returns
// whether the script charged. In mode "p" it keeps each bucket's state
// before the take in c.pre.
func decodeTake(seg []int64, n int, buckets []quota.Bucket, idx []int, res []quota.Result, pre bool, c *call) (bool, error) {
	per, err := takePart(seg, n, pre)
	if err != nil {
		return false, err
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
		r.Wait = usec(b.wait)
		r.Granted = 0
		if buckets[i].AtMost && seg[0] != 0 {
			r.Granted = buckets[i].Cost // a cost of 0 replies flag 1
			if seg[0] < 0 {
				r.Granted = -seg[0]
			}
		}
		switch {
		case pre && b.allowed:
			// Mode "p" reports an allowed bucket's wait where a denied
			// one's retry-after goes; it is booked only if the take
			// charged.
			r.RetryAfter, r.Wait = 0, 0
			if seg[0] != 0 {
				r.Wait = usec(b.retry)
			}
		case b.retry < 0:
			r.RetryAfter = quota.Never
		default:
			r.RetryAfter = usec(b.retry)
		}
		r.Source = floodgate.SourceStore
		if pre {
			c.pre = append(c.pre, b.remaining0, b.reset0)
		}
	}
	return seg[0] != 0, nil
}

// evalPre runs take.lua in mode "p" (an integer reply) and returns the
// time the script used and the take's integers (the charged flag, then 6
// per bucket), keeping the states in c.st for a refund.
func (s *Store) evalPre(ctx context.Context, c *call, n int) (int64, []int64, error) {
	cmd, err := runScript(ctx, s.client, c, takeScript, keysAt, redis.NewIntSliceCmd)
	if err != nil {
		return 0, nil, fmt.Errorf("redisstore: %w", err)
	}
	return parsePre(cmd.Val(), c, n)
}

// parsePre splits a one-take mode "p" reply of n buckets (see evalPre).
func parsePre(vals []int64, c *call, n int) (int64, []int64, error) {
	if len(vals) == 0 {
		return 0, nil, fmt.Errorf("redisstore: take.lua replied nothing in mode p")
	}
	seg, st, end, err := cutPre(vals, 1, n)
	if err != nil {
		return 0, nil, err
	}
	if end != len(vals) {
		return 0, nil, fmt.Errorf("redisstore: take.lua replied %d values for %d buckets in mode p, want %d", len(vals), n, end)
	}
	c.st = st
	return vals[0], seg, nil
}

// cutPre cuts the part of a mode "p" reply of a take of n buckets that
// starts at vals[o]: its integers (the charged flag, then 6 per bucket),
// its states (per bucket two, each its length in 32-bit words, 4 to 10,
// or 0, then its words), and where the next take's part starts.
func cutPre(vals []int64, o, n int) (seg, st []int64, end int, err error) {
	ints := o + 1 + 6*n
	if ints > len(vals) {
		return nil, nil, 0, fmt.Errorf("redisstore: take.lua replied %d values in mode p, short of a take of %d buckets at %d", len(vals), n, o)
	}
	end = ints
	for j := 0; j < 2*n; j++ {
		if end >= len(vals) {
			return nil, nil, 0, fmt.Errorf("redisstore: take.lua replied %d values in mode p, short of the states of a take of %d buckets", len(vals), n)
		}
		k := vals[end]
		if k != 0 && (k < 4 || k > 10) {
			return nil, nil, 0, fmt.Errorf("redisstore: take.lua replied a state of %d words in mode p", k)
		}
		end += 1 + int(k)
	}
	if end > len(vals) {
		return nil, nil, 0, fmt.Errorf("redisstore: take.lua replied %d values in mode p, short of the states of a take of %d buckets", len(vals), n)
	}
	return vals[o:ints:ints], vals[ints:end:end], end, nil
}

// eval sends the take.lua call in c by EVALSHA and, on NOSCRIPT, once more
// by EVAL (which also caches the script on that server), and returns its
// reply.
func (s *Store) eval(ctx context.Context, c *call) ([]int64, error) {
	cmd, err := runScript(ctx, s.client, c, takeScript, s.keyPos(), redis.NewIntSliceCmd)
	if err != nil {
		return nil, fmt.Errorf("redisstore: %w", err)
	}
	return cmd.Val(), nil
}
