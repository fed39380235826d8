package otel_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/fallback"
	fgotel "github.com/floodgate-go/floodgate/otel"
	"github.com/floodgate-go/floodgate/quota"
	"github.com/floodgate-go/floodgate/testing/clock"
	"github.com/floodgate-go/floodgate/tiers/memstore"
)

// away is a ledger whose takes are refused while down is set (a Redis
// that went away); its report calls reach the memstore it embeds.
type away struct {
	*memstore.Store
	down bool
}

func (a *away) Take(ctx context.Context, b []quota.Bucket, res []quota.Result) (bool, error) {
	if a.down {
		return false, errors.New("dial tcp: connect: connection refused")
	}
	return a.Store.Take(ctx, b, res)
}

// TestStoreCloseReachesFallback: the instrumented store's Close (an
// io.Closer) is fallback.Store's Close over a fallback store it wraps:
// the units the fallback admitted locally while its primary was away are
// charged to the primary, exactly.
func TestStoreCloseReachesFallback(t *testing.T) {
	o, err := fgotel.New()
	if err != nil {
		t.Fatal(err)
	}
	clk := clock.New(time.Unix(1_700_000_000, 0))
	mem, err := memstore.New(memstore.WithClock(clk))
	if err != nil {
		t.Fatal(err)
	}
	primary := &away{Store: mem, down: true}
	fb, err := fallback.New(primary, fallback.WithClock(clk), fallback.WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		t.Fatal(err)
	}
	w := o.Store(fb)
	ctx := context.Background()
	b := []quota.Bucket{{Key: "otel:close", Cost: 1, OnStoreError: quota.FailLocal,
		Limit: quota.Limit{Algorithm: quota.TokenBucket, Rate: 1, Period: time.Hour, Burst: 10}}}
	res := make([]quota.Result, 1)
	for i := range 3 {
		if ok, err := w.Take(ctx, b, res); !ok || err != nil || res[0].Source != floodgate.SourceLocalFallback {
			t.Fatalf("take %d: %v %v %+v, want allowed locally", i, ok, err, res[0])
		}
	}
	primary.down = false
	c, ok := w.(io.Closer)
	if !ok {
		t.Fatalf("the instrumented store %T is not an io.Closer", w)
	}
	if err := c.Close(); err != nil {
		t.Fatalf("Close through the instrumented store: %v", err)
	}
	if st := fb.Stats(); st.Owed != 0 || st.Charged != 3 {
		t.Fatalf("after Close through the wrapper: owed %d, charged %d; want 0, 3", st.Owed, st.Charged)
	}
	read := []quota.Bucket{b[0]}
	read[0].Cost = 0
	if _, err := mem.Take(ctx, read, res); err != nil || res[0].Remaining != 7 {
		t.Fatalf("the primary holds %+v, %v; want 7 remaining (10 - 3 admitted locally)", res[0], err)
	}
}
