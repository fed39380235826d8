package otel

import (
	"context"

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

// DecidesOnStoreError reports what the wrapped store reports, so a
// tiers.Limiter over an instrumented fallback store still sees its local
// fallback.
func (w instrumentedStore) DecidesOnStoreError() bool {
	d, ok := w.s.(interface{ DecidesOnStoreError() bool })
	return ok && d.DecidesOnStoreError()
}

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
