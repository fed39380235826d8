package interceptor

import (
	"context"
	"reflect"
	"sync/atomic"
	"time"

	"google.golang.org/grpc/tap"

	"github.com/floodgate-go/floodgate"
)

// TapHandle returns a grpc-go tap handle (grpc.InTapHandle) that admits
// gRPC calls through the stage a as soon as their headers arrive: in the
// transport, before the request message is read or decoded and before a
// handler goroutine starts. A call a denies is refused there with the
// status UnaryServer sends for that denial (code, message and details);
// refusing it costs little more than reading its headers. Use it for a
// stage whose decision needs only what the headers give, such as the
// shedder: TapHandle builds the call's floodgate.Request from the method,
// its options (cost and priority, as the interceptors resolve them), the
// trusted priority header and the extractors that read metadata or the
// peer; FromMessage, FromProtoField and a WithCost estimate that reads the
// message find nothing there.
//
//	srv := grpc.NewServer(
//		grpc.InTapHandle(fg.TapHandle(shed)),
//		grpc.ChainUnaryInterceptor(fg.UnaryServer(floodgate.Chain{shed, conc, limits})),
//		grpc.ChainStreamInterceptor(fg.StreamServer(floodgate.Chain{shed, conc, limits})),
//	)
//
// Wire a in the interceptors as well, as the same value (the Admitter
// itself, or an element of the top-level floodgate.Chain they wrap): the
// interceptor that wraps a does not admit a call a second time. It takes
// the tap's admission as a's, runs the chain's other stages, and gives
// the admission's Done the call's outcome when the handler returns or
// panics, or floodgate.Ignored when a later stage denies, once. A call the
// tap admitted that never reaches that interceptor (an unknown method, a
// message that fails to decode, an earlier interceptor's refusal) is
// released as floodgate.Ignored when its stream ends. With WithPerMessage,
// a stream's messages are still admitted through the whole chain.
//
// Calls exempt from the interceptors (health checks, ORCA load reports,
// WithSkip) pass the tap untouched. The observers (WithObserver) see the
// tap's decisions as they see the interceptors'; an observer that tags
// the current span finds none at the tap. A call refused at the tap gets
// no grpc-retry-pushback-ms trailer (a tap can send only a status):
// clients read the delay from the status's google.rpc.RetryInfo, as
// UnaryClient does. The handle runs under the transport's lock, once per
// call: a must decide without blocking, as the local shedder does. It
// panics if a is nil.
func (i *Interceptor) TapHandle(a floodgate.Admitter) tap.ServerInHandle {
	i.requireScopes(a, transportGRPC)
	ts := &tapStage{raw: a, a: i.stage(a)}
	i.tapped.Store(true)
	return func(ctx context.Context, info *tap.Info) (context.Context, error) {
		if i.exempt(info.FullMethodName) {
			return ctx, nil
		}
		return i.tapAdmit(ts, ctx, info.FullMethodName)
	}
}

// tapAdmit decides a call at the tap: the context carrying its admission,
// or the status error of its denial.
func (i *Interceptor) tapAdmit(ts *tapStage, ctx context.Context, method string) (context.Context, error) {
	r := new(floodgate.Request)
	i.build(ctx, r, &call{method: method, grpcMethod: true, md: Metadata{ctx: ctx}})
	d, done := i.admit(ts.a, ctx, r)
	if !d.Allowed {
		return ctx, ts.denial(i, ctx, d)
	}
	if done == nil {
		// Nothing to end: the interceptor may admit the stage again, as
		// it would without the tap, at no cost to the stage.
		return ctx, nil
	}
	ad := &tapAdmission{ts: ts, d: d, done: done}
	ctx = context.WithValue(ctx, tapKey{}, ad)
	ad.stop = context.AfterFunc(ctx, ad.release)
	return ctx, nil
}

// tapStage is a stage a TapHandle decides: as wired (raw, what the
// interceptors' Admitters are compared with) and observed.
type tapStage struct {
	raw floodgate.Admitter
	a   floodgate.Admitter
	// last is the error of the stage's last denial, which the next
	// identical one reuses: under a flood, a shedder refuses call after
	// call with one decision, and its status need not be built again.
	last atomic.Pointer[tapDenial]
}

// tapDenial is a denial's error and what its status is made of.
type tapDenial struct {
	key denyKey
	err error
}

// denyKey is what DenyStatus reads of a Decision with at most one quota.
type denyKey struct {
	stage         floodgate.Stage
	policy        string
	limit         int64
	window, retry time.Duration
	hideQuota     bool
}

// denial returns the error refusing a call the stage denied with d: the
// last one's when d would give the same status.
func (ts *tapStage) denial(i *Interceptor, ctx context.Context, d floodgate.Decision) error {
	if (i.c.deny != nil && i.c.deny.Message != nil) || len(d.Quotas()) > 1 {
		return denial(i.denyStatus(ctx, d)) // the status depends on more than the key
	}
	k := denyKey{d.Stage, d.Policy, d.Limit, d.Window, d.RetryAfter, d.HideQuota}
	if l := ts.last.Load(); l != nil && l.key == k {
		return l.err
	}
	err := denial(i.denyStatus(ctx, d))
	ts.last.Store(&tapDenial{key: k, err: err})
	return err
}

type tapKey struct{}

// tapAdmission is a call's admission by a tap, carried in its context
// until the interceptor wrapping the stage claims it.
type tapAdmission struct {
	ts    *tapStage
	d     floodgate.Decision
	done  floodgate.Done
	stop  func() bool
	state atomic.Int32 // tapPending, tapClaimed or tapReleased
}

const (
	tapPending int32 = iota
	tapClaimed
	tapReleased
)

// release ends an admission no interceptor claimed, when the call's
// stream ends.
func (ad *tapAdmission) release() {
	if ad.state.CompareAndSwap(tapPending, tapReleased) {
		ad.done(floodgate.Ignored)
	}
}

// Admit is the stage's admission as the tap made it, for the interceptor's
// chain in place of the stage: its Decision and its Done, once. An
// admission the end of its stream released already (the client went
// away before the interceptor ran) is made again by the stage.
func (ad *tapAdmission) Admit(ctx context.Context, r *floodgate.Request) (floodgate.Decision, floodgate.Done, error) {
	if ad.state.CompareAndSwap(tapPending, tapClaimed) {
		ad.stop()
		return ad.d, ad.done, nil
	}
	return ad.ts.a.Admit(ctx, r)
}

// served is an interceptor's stage: as wired (raw) and observed (a), and
// where the stage a tap decided sits in it.
type served struct {
	raw, a floodgate.Admitter
	plan   atomic.Pointer[tapPlan]
}

// tapPlan is where a tap's stage sits in an interceptor's Admitter: at idx
// of its top-level Chain, the whole Admitter (tapWhole), or nowhere
// (tapNone).
type tapPlan struct {
	ts  *tapStage
	idx int
}

const (
	tapNone  = -1
	tapWhole = -2
)

// forCall returns the Admitter of a call: s.a, with the stage a tap
// admitted the call through answered by that admission.
func (s *served) forCall(ctx context.Context) floodgate.Admitter {
	ad, ok := ctx.Value(tapKey{}).(*tapAdmission)
	if !ok {
		return s.a
	}
	p := s.plan.Load()
	if p == nil || p.ts != ad.ts {
		p = &tapPlan{ts: ad.ts, idx: s.find(ad.ts.raw)}
		s.plan.Store(p)
	}
	switch p.idx {
	case tapNone:
		return s.a
	case tapWhole:
		return ad
	}
	c := append(floodgate.Chain(nil), s.a.(floodgate.Chain)...)
	c[p.idx] = ad
	return c
}

// find returns where stage sits in s.raw.
func (s *served) find(stage floodgate.Admitter) int {
	if same(s.raw, stage) {
		return tapWhole
	}
	c, ok := s.raw.(floodgate.Chain)
	if !ok {
		return tapNone
	}
	if _, ok := s.a.(floodgate.Chain); !ok {
		return tapNone
	}
	for k, e := range c {
		if same(e, stage) {
			return k
		}
	}
	return tapNone
}

// same reports whether x and y are the same Admitter value, for values
// that can be compared (a Chain cannot).
func same(x, y floodgate.Admitter) bool {
	if x == nil || y == nil || reflect.TypeOf(x) != reflect.TypeOf(y) {
		return false
	}
	if !reflect.ValueOf(x).Comparable() || !reflect.ValueOf(y).Comparable() {
		return false
	}
	return x == y
}
