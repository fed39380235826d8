package otel

import (
	"context"
	"fmt"
	"io"

	"github.com/floodgate-go/floodgate/quota"
	"go.opentelemetry.io/otel/trace"
)

// Store returns a quota.Store that records every Take of s in
// floodgate.store.duration (timed on the observer's clock, error.type set
// when Take fails; a deny is not a failure). When the span in the Take's
// context is recording, the Take also gets its own child span
// "floodgate.store" from the configured TracerProvider (see
// StartStoreCall); otherwise no span is started, so unsampled requests pay
// nothing but the measurement.
//
// The returned store forwards every capability of s, untimed, so wrapping
// a store never changes what a Limiter or a local-first store can do with
// it: it implements quota.Settler (Settle, CanSettle), quota.Reporter
// (Report, Resolve), DecidesOnStoreError, Close and Unwrap
// whatever s is; the receiver of late answers package fallback puts in a
// Take's context reaches s with the context. A method s lacks returns an error naming s's type, and
// the capability checks report the capability missing (quota.Settles and
// the checks of packages tiers and tiers/localfirst follow Unwrap to s),
// so a Limiter refuses at construction what would fail per request.
// Methods particular to one store (fallback's Stats, localfirst's Flush)
// stay on the store itself.
//
// Wrap the primary store to time Redis itself, or the fallback store to
// time what the limiter waits for:
//
//	limits, err := tiers.NewLimiter(obs.Store(guarded), policy)
func (o *Observer) Store(s quota.Store) quota.Store {
	return instrumentedStore{s: s, o: o}
}

type instrumentedStore struct {
	s quota.Store
	o *Observer
}

// Unwrap returns the store this one times (see quota.Layers).
func (w instrumentedStore) Unwrap() quota.Store { return w.s }

// DecidesOnStoreError reports whether the wrapped store, or a store
// beneath it, answers every Take itself when its backend fails (package
// fallback; memstore), so a tiers.Limiter over an instrumented fallback
// store still sees its local fallback.
func (w instrumentedStore) DecidesOnStoreError() bool {
	for l := range quota.Layers(w.s) {
		if d, ok := l.(interface{ DecidesOnStoreError() bool }); ok && d.DecidesOnStoreError() {
			return true
		}
	}
	return false
}

// CanSettle reports whether the wrapped store can settle
// (quota.Settles).
func (w instrumentedStore) CanSettle() bool { return quota.Settles(w.s) }

// Take implements quota.Store.
func (w instrumentedStore) Take(ctx context.Context, buckets []quota.Bucket, res []quota.Result) (bool, error) {
	if trace.SpanFromContext(ctx).IsRecording() {
		ctx, end := w.o.StartStoreCall(ctx)
		ok, err := w.s.Take(ctx, buckets, res)
		end(err)
		return ok, err
	}
	start := w.o.clock.Now()
	ok, err := w.s.Take(ctx, buckets, res)
	w.o.RecordStoreCall(ctx, w.o.clock.Now().Sub(start), err)
	return ok, err
}

// Settle implements quota.Settler with the wrapped store's Settle, or
// returns an error when it has none.
func (w instrumentedStore) Settle(ctx context.Context, buckets []quota.Bucket, took []quota.Result) error {
	st, ok := w.s.(quota.Settler)
	if !ok {
		return w.lacks("Settle", "a quota.Settler")
	}
	return st.Settle(ctx, buckets, took)
}

// Report implements quota.Reporter with the wrapped store's Report, or
// returns an error when it has none.
func (w instrumentedStore) Report(ctx context.Context, instance, seq uint64, buckets []quota.Bucket, res []quota.ReportResult) error {
	r, ok := w.s.(quota.Reporter)
	if !ok {
		return w.lacks("Report", "a quota.Reporter")
	}
	return r.Report(ctx, instance, seq, buckets, res)
}

// Resolve implements quota.Reporter with the wrapped store's Resolve, or
// returns an error when it has none.
func (w instrumentedStore) Resolve(ctx context.Context, instance, seq uint64, buckets []quota.Bucket, res []quota.ReportResult) error {
	r, ok := w.s.(quota.Reporter)
	if !ok {
		return w.lacks("Resolve", "a quota.Reporter")
	}
	return r.Resolve(ctx, instance, seq, buckets, res)
}

// Close closes the wrapped store when it has a Close method: Close()
// error (redisstore), or Close(context.Context) error, given a background
// context (tiers/localfirst: it returns its leases and reports within its
// sync timeout; fallback: it stops its background work and hands over the
// units it admitted locally, within its own timeouts and its primary's). A store
// without one has nothing to close: nil. To bound a fallback or
// localfirst store's hand-over by a context of your own, call its Close
// before this one (a second Close of either returns nil at once).
func (w instrumentedStore) Close() error {
	switch c := w.s.(type) {
	case io.Closer:
		return c.Close()
	case interface{ Close(context.Context) error }:
		return c.Close(context.Background())
	}
	return nil
}

func (w instrumentedStore) lacks(method, want string) error {
	return fmt.Errorf("otel: %s: the instrumented store %T is not %s", method, w.s, want)
}
