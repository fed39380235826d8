package concurrency_test

import (
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/concurrency"
)

// BenchmarkWaitOverload offers a service of 4 slots and 2ms of work per
// request (capacity 2000 requests/s) one arrival every 250µs (4000/s,
// twice its capacity), open loop, and compares denying at once with
// waiting up to 20ms in FIFO and in LIFO order. Each iteration is one
// arrival, so -benchtime=Nx bounds the run (N arrivals, about N/4 ms).
// It reports, of the requests admitted, the latency from arrival to the
// end of their work (p50-ms, p99-ms: time waited + work) and the share
// admitted (admitted-%). The three run in turn, three rounds of each
// (round1/deny, round1/fifo, ...), so a noisy moment does not favour one.
// bench/README.md has the figures and the command.
func BenchmarkWaitOverload(b *testing.B) {
	const (
		slots    = 4
		work     = 2 * time.Millisecond
		interval = 250 * time.Microsecond
		maxWait  = 20 * time.Millisecond
	)
	contenders := []struct {
		name string
		wait concurrency.Wait
	}{
		{"deny", concurrency.Wait{}},
		{"fifo", concurrency.Wait{Max: maxWait, Order: concurrency.FIFO}},
		{"lifo", concurrency.Wait{Max: maxWait, Order: concurrency.LIFO}},
	}
	for round := 1; round <= 3; round++ {
		for _, c := range contenders {
			b.Run("round"+strconv.Itoa(round)+"/"+c.name, func(b *testing.B) { overload(b, c.wait, slots, work, interval) })
		}
	}
}

// overload runs one contender of BenchmarkWaitOverload.
func overload(b *testing.B, wait concurrency.Wait, slots int64, work, interval time.Duration) {
	l, err := concurrency.New(concurrency.WithGlobal(slots), concurrency.WithWait(wait))
	if err != nil {
		b.Fatal(err)
	}
	var (
		mu   sync.Mutex
		lats []time.Duration
		wg   sync.WaitGroup
	)
	r := req("/m", "acme", "alice")
	start := time.Now()
	i := 0
	for b.Loop() {
		if d := time.Until(start.Add(time.Duration(i) * interval)); d > 0 {
			time.Sleep(d)
		}
		i++
		wg.Add(1)
		go func() {
			defer wg.Done()
			arrived := time.Now()
			d, done, _ := l.Admit(ctx, r)
			if !d.Allowed {
				return
			}
			time.Sleep(work)
			done(floodgate.Result{})
			lat := time.Since(arrived)
			mu.Lock()
			lats = append(lats, lat)
			mu.Unlock()
		}()
	}
	wg.Wait()
	b.StopTimer()
	if len(lats) == 0 {
		b.Fatal("nothing admitted")
	}
	slices.Sort(lats)
	q := func(p float64) float64 {
		return float64(lats[min(len(lats)-1, int(p*float64(len(lats))))].Microseconds()) / 1000
	}
	b.ReportMetric(q(0.5), "p50-ms")
	b.ReportMetric(q(0.99), "p99-ms")
	b.ReportMetric(100*float64(len(lats))/float64(i), "admitted-%")
}
