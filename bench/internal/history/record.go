package history

import (
	"context"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/quota"
)

// Recorder is a quota.Store that records every take it passes to the store
// it wraps. Only takes whose buckets are all Exact are recorded (the
// others are passed on unrecorded), and only while it is started. It is a
// quota.Reporter too, over a store that is one (redisstore): the report
// calls with which package fallback charges what it admitted locally are
// recorded as well (see Report), so that the fallback charges, and runs
// its late calls, under a Recorder as it does without one.
type Recorder struct {
	inner   quota.Store
	proc    int
	on      atomic.Bool
	mu      sync.Mutex
	ops     []Op
	skipped atomic.Int64
	// unresolved are the buckets of report calls whose reply never came
	// and that Resolve has not resolved yet.
	unresolved map[reportKey]pendingReport
	// taken are the keys of the takes recorded: a report is recorded
	// only on them (a key whose takes were not recorded, a warm-up's,
	// has a state the history cannot start from).
	taken map[string]bool
}

// NewRecorder returns a Recorder of the takes process proc passes to inner.
// It records nothing until Start.
func NewRecorder(inner quota.Store, proc int) *Recorder {
	return &Recorder{inner: inner, proc: proc}
}

// Start starts recording (after a warm-up, say).
func (r *Recorder) Start() { r.on.Store(true) }

// Stop stops recording.
func (r *Recorder) Stop() { r.on.Store(false) }

// Unwrap returns the wrapped store (see quota.Layers).
func (r *Recorder) Unwrap() quota.Store { return r.inner }

// Ops returns a copy of the recorded takes and report calls (a report
// bucket still unresolved as one of unknown outcome).
func (r *Recorder) Ops() []Op {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append(append([]Op(nil), r.ops...), r.unresolvedOps()...)
}

// Skipped returns how many takes were passed on unrecorded while
// recording (not all Exact, or answered by a local cache without Redis),
// and report buckets of keys no recorded take touched.
func (r *Recorder) Skipped() int64 { return r.skipped.Load() }

type nowKey struct{}

// Take implements quota.Store: it passes the take on and records it.
func (r *Recorder) Take(ctx context.Context, buckets []quota.Bucket, res []quota.Result) (bool, error) {
	if !r.on.Load() {
		return r.inner.Take(ctx, buckets, res)
	}
	for i := range buckets {
		if buckets[i].Consistency != quota.Exact {
			r.skipped.Add(1)
			return r.inner.Take(ctx, buckets, res)
		}
	}
	r.mu.Lock()
	if r.taken == nil {
		r.taken = make(map[string]bool)
	}
	for i := range buckets {
		r.taken[buckets[i].Key] = true
	}
	r.mu.Unlock()
	now := new(int64)
	ctx = context.WithValue(ctx, nowKey{}, now)
	sent := time.Now().UnixNano()
	allowed, err := r.inner.Take(ctx, buckets, res)
	op := Op{Proc: r.proc, Sent: sent, Answered: time.Now().UnixNano(), Now: *now, Buckets: make([]Bucket, len(buckets))}
	for i := range buckets {
		b := &buckets[i]
		op.Buckets[i] = Bucket{Key: b.Key, Limit: b.Limit, Cost: b.Cost}
		if err == nil {
			if res[i].Source == floodgate.SourceCache {
				r.skipped.Add(1)
				return allowed, err
			}
			op.Buckets[i].Allowed, op.Buckets[i].Remaining = res[i].Allowed, res[i].Remaining
		}
	}
	switch {
	case err != nil:
		op.Outcome, op.Err, op.Now = Unknown, err.Error(), 0
	case allowed:
		op.Outcome = Allowed
	default:
		op.Outcome = Denied
	}
	r.mu.Lock()
	r.ops = append(r.ops, op)
	r.mu.Unlock()
	return allowed, err
}

// NowHook is a go-redis hook that, for a take a Recorder passes on,
// reads the Redis time its script used from the reply (take.lua's first
// integer) into the take's record. It sees only the command and its reply,
// so the store is unchanged; it needs the store's batching off (a batched
// take is sent under the batcher's context, not the take's).
type NowHook struct{}

// DialHook implements redis.Hook.
func (NowHook) DialHook(next redis.DialHook) redis.DialHook { return next }

// ProcessPipelineHook implements redis.Hook.
func (NowHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// ProcessHook implements redis.Hook.
func (NowHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		p, ok := ctx.Value(nowKey{}).(*int64)
		if !ok || err != nil {
			return err
		}
		if n := strings.ToLower(cmd.Name()); n != "evalsha" && n != "eval" {
			return err
		}
		if v, ok := cmd.(interface{ Val() []int64 }); ok && len(v.Val()) > 0 {
			*p = v.Val()[0]
		}
		return err
	}
}
