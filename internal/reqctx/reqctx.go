// Package reqctx is the context node that carries a call's
// floodgate.Request: how a transport (package interceptor) starts a call,
// how a later floodgate interceptor of the same call finds the Request
// and who built it, and where floodgate.ReportCost and ReportMeter leave
// the actual costs for the transport to read when the call ends.
//
// What it decides: that the Request and the context that carries it are
// one allocation, and that the context still cancels as its parent does
// without a goroutine. It is generic over the request type so that the
// core package floodgate can build on it while it imports nothing of
// floodgate (the core's FromContext and ReportCost read what it stores).
package reqctx

import (
	"context"
	"sync"
	"sync/atomic"
	"time"
)

type (
	requestKey struct{}
	originKey  struct{}
	costKey    struct{}
	waitKey    struct{}
)

// node is a context node and the request it carries, allocated together.
// Done, Err and Deadline are the parent's (embedded), so context.WithCancel
// below it still finds the parent's cancellation without a goroutine.
type node[R any] struct {
	context.Context
	r      R
	origin any
	costs  costs
	wait   atomic.Int64 // nanoseconds a stage waited on a degraded store (Wait)
}

// costs is what the handler reported of the request's actual cost: the
// default meter's (SetCost) and the named meters' (SetMeter).
type costs struct {
	cost   atomic.Int64 // SetCost's value plus one; 0 when none was set
	meters atomic.Pointer[Meters]
}

func (c *node[R]) Value(key any) any {
	switch key {
	case requestKey{}:
		return &c.r
	case originKey{}:
		return c.origin
	case costKey{}:
		return &c.costs
	case waitKey{}:
		return &c.wait
	}
	return c.Context.Value(key)
}

// New returns a context carrying a new, zero request, and that request,
// in a single allocation: the way a transport starts a call. origin
// identifies what built the request (a transport's configuration; it may
// be nil) and is what Origin reports, so that a later layer can tell
// whether it would have built the same request.
func New[R any](parent context.Context, origin any) (context.Context, *R) {
	c := &node[R]{Context: parent, origin: origin}
	return c, &c.r
}

// Request returns the request stored in ctx by New, if any.
func Request[R any](ctx context.Context) (*R, bool) {
	r, ok := ctx.Value(requestKey{}).(*R)
	return r, ok
}

// Origin returns the origin given to New for the request in ctx, or nil.
func Origin(ctx context.Context) any { return ctx.Value(originKey{}) }

// SetCost records n (>= 0) as the actual cost of the request in ctx,
// replacing an earlier one. It reports false, and records nothing, when
// ctx carries no request made by New.
func SetCost(ctx context.Context, n int64) bool {
	c, ok := ctx.Value(costKey{}).(*costs)
	if !ok {
		return false
	}
	c.cost.Store(n + 1)
	return true
}

// Cost returns the cost last given to SetCost for the request in ctx, and
// whether one was given. A transport reads it when the request finishes,
// for Result.Cost and Result.HasCost.
func Cost(ctx context.Context) (int64, bool) {
	n, ok, _ := Costs(ctx)
	return n, ok
}

// Costs returns, in one lookup, what Cost returns and the named meters
// reported for the request in ctx (SetMeter), nil when none was.
func Costs(ctx context.Context) (int64, bool, *Meters) {
	c, ok := ctx.Value(costKey{}).(*costs)
	if !ok {
		return 0, false, nil
	}
	m := c.meters.Load()
	if v := c.cost.Load(); v > 0 {
		return v - 1, true, m
	}
	return 0, false, m
}

// SetMeter records n (>= 0) as the actual value of the named meter
// (non-empty: the default meter's is SetCost's) for the request in ctx,
// replacing an earlier one. It reports false, and records nothing, when
// ctx carries no request made by New. The first call of a request
// allocates its Meters; requests that report no meter allocate nothing.
func SetMeter(ctx context.Context, name string, n int64) bool {
	c, ok := ctx.Value(costKey{}).(*costs)
	if !ok {
		return false
	}
	m := c.meters.Load()
	if m == nil {
		m = &Meters{}
		if !c.meters.CompareAndSwap(nil, m) {
			m = c.meters.Load()
		}
	}
	m.set(name, n)
	return true
}

// Meters are the values of the named meters reported for one request
// (SetMeter). Safe for concurrent use.
type Meters struct {
	mu    sync.Mutex
	names []string
	vals  []int64
	// inline room for the common few meters
	nbuf [4]string
	vbuf [4]int64
}

func (m *Meters) set(name string, n int64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for i, k := range m.names {
		if k == name {
			m.vals[i] = n
			return
		}
	}
	if m.names == nil {
		m.names, m.vals = m.nbuf[:0], m.vbuf[:0]
	}
	m.names = append(m.names, name)
	m.vals = append(m.vals, n)
}

// Meter returns the value last reported for the named meter, and whether
// one was.
func (m *Meters) Meter(name string) (int64, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for i, k := range m.names {
		if k == name {
			return m.vals[i], true
		}
	}
	return 0, false
}

// Wait returns the counter of the nanoseconds the request in ctx spent
// waiting on a degraded store (a stalled Redis: a call that ran out of
// its budget, a local deny waiting for a late answer), or nil when ctx
// carries no request made by New. The stage that waits adds to it, on its
// slow paths only; a stage that learns the service's latency from its
// requests (the adaptive shedder) takes from a request's latency what
// was added after it admitted the request, so that a store's stall is not
// read as the service's overload.
func Wait(ctx context.Context) *atomic.Int64 {
	w, _ := ctx.Value(waitKey{}).(*atomic.Int64)
	return w
}

// AddWait adds d to the wait counter of the request in ctx, if any.
func AddWait(ctx context.Context, d time.Duration) {
	if w := Wait(ctx); w != nil && d > 0 {
		w.Add(int64(d))
	}
}
