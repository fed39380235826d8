package guard

import (
	"context"
	"testing"

	"github.com/floodgate-go/floodgate"
)

// BenchmarkLoadReports is what WithLoadReports adds to a request: the
// chain's Admit and Done without and with the load meter (off, on), and
// the report every call's trailer is built from (report: the window's
// report read and made an orca.ServerMetrics; grpc-go then marshals it).
func BenchmarkLoadReports(b *testing.B) {
	policy := WithPolicy([]byte("rules: []\nshedder: {capacity: 1000}\n"))
	for _, bc := range []struct {
		name string
		opts []Option
	}{
		{"off", []Option{WithInProcess(), WithLogger(quiet), policy}},
		{"on", []Option{WithInProcess(), WithLogger(quiet), policy, WithLoadReports()}},
	} {
		b.Run("chain/"+bc.name, func(b *testing.B) {
			g, err := New(context.Background(), bc.opts...)
			if err != nil {
				b.Fatal(err)
			}
			defer g.Close(context.Background())
			chain, ctx := g.Chain(), context.Background()
			r := &floodgate.Request{Method: "/svc/M", Cost: 1}
			b.ReportAllocs()
			for b.Loop() {
				d, done, err := chain.Admit(ctx, r)
				if err != nil || !d.Allowed {
					b.Fatal(d, err)
				}
				done(floodgate.Result{})
			}
		})
	}
	b.Run("report", func(b *testing.B) {
		g, err := New(context.Background(), WithInProcess(), WithLogger(quiet), policy, WithLoadReports())
		if err != nil {
			b.Fatal(err)
		}
		defer g.Close(context.Background())
		p := orcaProvider{g}
		b.ReportAllocs()
		for b.Loop() {
			if p.ServerMetrics().QPS < 0 {
				b.Fatal("negative QPS")
			}
		}
	})
}
