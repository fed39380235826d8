package localfirst_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate/tiers"
	"github.com/floodgate-go/floodgate/tiers/localfirst"
	"github.com/floodgate-go/floodgate/tiers/memstore"
)

// BenchmarkTakeLocal measures a 4-level take decided locally (every level
// async or leased, keys warm), the path local-first exists for.
func BenchmarkTakeLocal(b *testing.B) {
	for _, mode := range []tiers.Consistency{tiers.Async, tiers.Leased} {
		b.Run(mode.String(), func(b *testing.B) {
			ledger, err := memstore.New()
			if err != nil {
				b.Fatal(err)
			}
			s, err := localfirst.New(ledger, ledger)
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close(context.Background())
			bs := make([]tiers.Bucket, 4)
			for i := range bs {
				bs[i] = bucket("bench:"+strconv.Itoa(i), mode, 1_000_000_000, 1_000_000_000)
				bs[i].SyncInterval = 50 * time.Millisecond
			}
			res := make([]tiers.Result, len(bs))
			for range 100 { // warm: learn the state, grow the leases
				_, _ = s.Take(context.Background(), bs, res)
			}
			b.ReportAllocs()
			b.ResetTimer()
			for b.Loop() {
				if ok, err := s.Take(context.Background(), bs, res); !ok || err != nil {
					b.Fatal(ok, err)
				}
			}
		})
	}
}
