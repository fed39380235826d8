package concurrency_test

import (
	"github.com/floodgate-go/floodgate"
	"strconv"
	"sync/atomic"
	"testing"

	"github.com/floodgate-go/floodgate/concurrency"
)

// BenchmarkAdmitDone measures Acquire+Release (Admit then Done) on the
// local path, serial and parallel. In "parallel/distinct-keys" each
// goroutine uses its own user; in "parallel/shared-key" all contend on one.
func BenchmarkAdmitDone(b *testing.B) {
	configs := []struct {
		name string
		opts []concurrency.Option
	}{
		{"global", []concurrency.Option{concurrency.WithGlobal(1 << 30)}},
		{"global+user", []concurrency.Option{concurrency.WithGlobal(1 << 30),
			concurrency.WithPerKey(concurrency.PerKey{Name: "u", Cap: 1 << 30, Key: byUser})}},
		{"global+user+tenant", []concurrency.Option{concurrency.WithGlobal(1 << 30),
			concurrency.WithPerKey(concurrency.PerKey{Name: "u", Cap: 1 << 30, Key: byUser}),
			concurrency.WithPerKey(concurrency.PerKey{Name: "t", Cap: 1 << 30, Key: byTenant})}},
	}
	for _, c := range configs {
		l, err := concurrency.New(c.opts...)
		if err != nil {
			b.Fatal(err)
		}
		b.Run(c.name+"/serial", func(b *testing.B) {
			r := req("/m", "acme", "alice")
			b.ReportAllocs()
			for b.Loop() {
				_, done, _ := l.Admit(ctx, r)
				done(floodgate.Result{})
			}
		})
		var g atomic.Int64
		b.Run(c.name+"/parallel/distinct-keys", func(b *testing.B) {
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				n := strconv.FormatInt(g.Add(1), 10)
				r := req("/m", "tenant-"+n, "user-"+n)
				for pb.Next() {
					_, done, _ := l.Admit(ctx, r)
					done(floodgate.Result{})
				}
			})
		})
		b.Run(c.name+"/parallel/shared-key", func(b *testing.B) {
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				r := req("/m", "acme", "alice")
				for pb.Next() {
					_, done, _ := l.Admit(ctx, r)
					done(floodgate.Result{})
				}
			})
		})
	}
}

// BenchmarkAdaptiveAdmitDone measures the adaptive limiter: a
// compare-and-swap and a clock read at Admit, a clock read and a mutex (one
// latency sample into the window's reservoir) at Done, and one small
// allocation (the Done, which carries the start time).
func BenchmarkAdaptiveAdmitDone(b *testing.B) {
	for _, alg := range []concurrency.AdaptiveAlgorithm{concurrency.Gradient2, concurrency.Vegas} {
		a, err := concurrency.NewAdaptive(concurrency.AdaptiveConfig{Algorithm: alg, Initial: 1 << 20, Max: 1 << 20})
		if err != nil {
			b.Fatal(err)
		}
		b.Run(alg.String()+"/serial", func(b *testing.B) {
			r := req("/m", "acme", "alice")
			b.ReportAllocs()
			for b.Loop() {
				_, done, _ := a.Admit(ctx, r)
				done(floodgate.Result{})
			}
		})
		b.Run(alg.String()+"/parallel", func(b *testing.B) {
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				r := req("/m", "acme", "alice")
				for pb.Next() {
					_, done, _ := a.Admit(ctx, r)
					done(floodgate.Result{})
				}
			})
		})
	}
}
