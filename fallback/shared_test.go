package fallback_test

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"

	"github.com/floodgate-go/floodgate/fallback"
	"github.com/floodgate-go/floodgate/quota"
	"github.com/floodgate-go/floodgate/testing/redistest"
	"github.com/floodgate-go/floodgate/tiers/memstore"
	"github.com/floodgate-go/floodgate/tiers/redisstore"
)

// TestSharedStoreWithoutInstancesWarns: a fallback over the Redis store
// (here beneath another wrapper, found through Unwrap) without
// WithInstances says at New that the fleet would admit N times the limit
// while Redis is away; with WithInstances, or over a store only this
// process holds, it says nothing.
func TestSharedStoreWithoutInstancesWarns(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	rs, err := redisstore.New(srv.Client())
	if err != nil {
		t.Fatal(err)
	}
	mem, err := memstore.New()
	if err != nil {
		t.Fatal(err)
	}
	const warning = "fallback over a store shared by other processes without WithInstances"
	for _, tc := range []struct {
		name  string
		store func() quota.Store
		opts  []fallback.Option
		warns bool
	}{
		{"redis", func() quota.Store { return rs }, nil, true},
		{"redis wrapped", func() quota.Store { return &wrapped{rs} }, nil, true},
		{"redis with instances", func() quota.Store { return rs }, []fallback.Option{fallback.WithInstances(func() int { return 3 })}, false},
		{"memory", func() quota.Store { return mem }, nil, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var buf bytes.Buffer
			opts := append([]fallback.Option{fallback.WithLogger(slog.New(slog.NewTextHandler(&buf, nil)))}, tc.opts...)
			fb, err := fallback.New(tc.store(), opts...)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { fb.Close(t.Context()) })
			if got := strings.Contains(buf.String(), warning); got != tc.warns {
				t.Errorf("warned %v, want %v; log:\n%s", got, tc.warns, buf.String())
			}
		})
	}
}

// wrapped hides the store's methods but Take behind the unwrap
// convention, as a timing or logging wrapper would.
type wrapped struct{ quota.Store }

func (w *wrapped) Unwrap() quota.Store { return w.Store }
