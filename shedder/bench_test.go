package shedder_test

import (
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/shedder"
)

func BenchmarkShedderAdmitDone(b *testing.B) {
	s, err := shedder.New(1 << 20)
	if err != nil {
		b.Fatal(err)
	}
	benchAdmitDone(b, s)
	b.Run("adaptive", func(b *testing.B) {
		a, err := shedder.New(1<<20, shedder.WithAdaptiveCapacity(shedder.AdaptiveCapacity{Max: 1 << 20}))
		if err != nil {
			b.Fatal(err)
		}
		benchAdmitDone(b, a)
	})
	b.Run("shed", func(b *testing.B) {
		full, err := shedder.New(10)
		if err != nil {
			b.Fatal(err)
		}
		for range 10 {
			full.Admit(ctx, &floodgate.Request{Priority: floodgate.PriorityCritical})
		}
		req := &floodgate.Request{Priority: floodgate.PriorityRead}
		b.ReportAllocs()
		for b.Loop() {
			full.Admit(ctx, req)
		}
	})
}

// benchAdmitDone runs Admit then Done of a read on a, serial and parallel.
func benchAdmitDone(b *testing.B, a floodgate.Admitter) {
	b.Run("serial", func(b *testing.B) {
		req := &floodgate.Request{Priority: floodgate.PriorityRead}
		b.ReportAllocs()
		for b.Loop() {
			_, done, _ := a.Admit(ctx, req)
			done(floodgate.Result{})
		}
	})
	b.Run("parallel", func(b *testing.B) {
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			r := &floodgate.Request{Priority: floodgate.PriorityRead}
			for pb.Next() {
				_, done, _ := a.Admit(ctx, r)
				done(floodgate.Result{})
			}
		})
	})
}

// Overload scenario: a service with 50 workers whose handler takes
// 2 ms, guarded by a Shedder of capacity 50, offered 3x its capacity by 150
// closed-loop clients (15 critical, 45 write, 45 read, 45 test: the
// 10/30/30/30 mix). A client whose request is shed waits the handler time
// before its next request, so every client offers one request per >= 2 ms
// and the offered load stays 3x capacity (75 000/s against 25 000/s).
// Latency is from Admit to the end of the handler, including any wait for a
// free worker ("queued" counts the served requests that had to wait). The unloaded baseline runs the 15 critical clients alone,
// before and after the overload run.
//
// Run: go test -run '^$' -bench Overload -benchtime 1x ./shedder/
const (
	overloadCapacity = 50
	overloadService  = 2 * time.Millisecond
	overloadRequests = 150 // per client
	overloadDeadline = 30 * time.Second
)

type classStats struct {
	offered, served, shed int
	queued                int // served requests that waited for a free worker
	lat                   []time.Duration
	firstShed             time.Duration // since the start; -1 if never
}

func runOverload(b *testing.B, clients []floodgate.Priority, opts ...shedder.Option) map[floodgate.Priority]*classStats {
	s, err := shedder.New(overloadCapacity, opts...)
	if err != nil {
		b.Fatal(err)
	}
	workers := make(chan struct{}, overloadCapacity) // the service's 50 workers
	type result struct {
		p         floodgate.Priority
		served    []time.Duration
		shed      int
		queued    int
		firstShed time.Duration
	}
	results := make([]result, len(clients))
	start := time.Now()
	deadline := start.Add(overloadDeadline)
	var wg sync.WaitGroup
	for i, p := range clients {
		wg.Go(func() {
			res := result{p: p, served: make([]time.Duration, 0, overloadRequests), firstShed: -1}
			req := &floodgate.Request{Priority: p}
			for range overloadRequests {
				if time.Now().After(deadline) {
					break
				}
				t0 := time.Now()
				d, done, _ := s.Admit(ctx, req)
				if !d.Allowed {
					res.shed++
					if res.firstShed < 0 {
						res.firstShed = t0.Sub(start)
					}
					time.Sleep(overloadService)
					continue
				}
				select {
				case workers <- struct{}{}:
				default:
					res.queued++
					workers <- struct{}{}
				}
				time.Sleep(overloadService)
				<-workers
				done(floodgate.Result{})
				res.served = append(res.served, time.Since(t0))
			}
			results[i] = res
		})
	}
	wg.Wait()
	if s.InFlight() != 0 {
		b.Fatalf("in flight %d after the run, want 0", s.InFlight())
	}
	out := map[floodgate.Priority]*classStats{}
	for _, r := range results {
		st := out[r.p]
		if st == nil {
			st = &classStats{firstShed: -1}
			out[r.p] = st
		}
		st.offered += len(r.served) + r.shed
		st.served += len(r.served)
		st.shed += r.shed
		st.queued += r.queued
		st.lat = append(st.lat, r.served...)
		if r.firstShed >= 0 && (st.firstShed < 0 || r.firstShed < st.firstShed) {
			st.firstShed = r.firstShed
		}
	}
	for _, st := range out {
		slices.Sort(st.lat)
	}
	return out
}

func percentile(sorted []time.Duration, q float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(q*float64(len(sorted))+0.5) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}

func BenchmarkOverload(b *testing.B) {
	b.Run("default", func(b *testing.B) { benchOverload(b) })
	b.Run("hold=1s", func(b *testing.B) { benchOverload(b, shedder.WithHysteresis(shedder.DefaultHysteresis, time.Second)) })
}

func benchOverload(b *testing.B, opts ...shedder.Option) {
	var mix []floodgate.Priority
	for i := range 3 * overloadCapacity {
		switch i % 10 {
		case 0:
			mix = append(mix, floodgate.PriorityCritical)
		case 1, 2, 3:
			mix = append(mix, floodgate.PriorityWrite)
		case 4, 5, 6:
			mix = append(mix, floodgate.PriorityRead)
		default:
			mix = append(mix, floodgate.PriorityTest)
		}
	}
	var criticalOnly []floodgate.Priority
	for _, p := range mix {
		if p == floodgate.PriorityCritical {
			criticalOnly = append(criticalOnly, p)
		}
	}
	// The unloaded baseline runs before and after the overload; the smaller
	// of its two p99s is used, which makes the ratio stricter, not kinder,
	// on a noisy machine.
	var base, base2, load map[floodgate.Priority]*classStats
	for b.Loop() {
		base = runOverload(b, criticalOnly, opts...)
		load = runOverload(b, mix, opts...)
		base2 = runOverload(b, criticalOnly, opts...)
	}
	unloadedP99 := min(percentile(base[floodgate.PriorityCritical].lat, 0.99), percentile(base2[floodgate.PriorityCritical].lat, 0.99))

	var tb strings.Builder
	fmt.Fprintf(&tb, "\ncapacity %d, handler %s, %d clients (3x), %d requests each; unloaded critical p50 %s, p99 %s before / %s after\n",
		overloadCapacity, overloadService, len(mix), overloadRequests,
		percentile(base[floodgate.PriorityCritical].lat, 0.50).Round(time.Microsecond),
		percentile(base[floodgate.PriorityCritical].lat, 0.99).Round(time.Microsecond),
		percentile(base2[floodgate.PriorityCritical].lat, 0.99).Round(time.Microsecond))
	fmt.Fprintf(&tb, "%-9s %8s %8s %8s %8s %10s %10s %12s %8s\n", "priority", "offered", "served", "shed", "served%", "p50", "p99", "first shed", "queued")
	for _, p := range []floodgate.Priority{floodgate.PriorityCritical, floodgate.PriorityWrite, floodgate.PriorityRead, floodgate.PriorityTest} {
		st := load[p]
		first := "never"
		if st.firstShed >= 0 {
			first = st.firstShed.Round(time.Microsecond).String()
		}
		pct := 100 * float64(st.served) / float64(st.offered)
		fmt.Fprintf(&tb, "%-9s %8d %8d %8d %7.2f%% %10s %10s %12s %8d\n", p, st.offered, st.served, st.shed, pct,
			percentile(st.lat, 0.50).Round(time.Microsecond), percentile(st.lat, 0.99).Round(time.Microsecond), first, st.queued)
		b.ReportMetric(pct, p.String()+"-served-%")
	}
	crit := load[floodgate.PriorityCritical]
	ratio := float64(percentile(crit.lat, 0.99)) / float64(unloadedP99)
	fmt.Fprintf(&tb, "critical p99 / unloaded p99 = %.2f (target <= 2), critical served %.3f%% (target >= 99.9%%)\n",
		ratio, 100*float64(crit.served)/float64(crit.offered))
	b.ReportMetric(ratio, "critical-p99/unloaded")
	b.Log(tb.String())
}
