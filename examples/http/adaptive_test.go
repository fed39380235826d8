package main

import (
	"io"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate/examples/internal/exampletest"
)

// adaptiveGauges reads what the adaptive stages have learnt from /metrics.
func adaptiveGauges(t *testing.T, metrics string) (capacity, limit float64) {
	t.Helper()
	_, text := get(t, "GET", metrics)
	capacity, ok1 := exampletest.Gauge(text, "shop_shedder_capacity")
	limit, ok2 := exampletest.Gauge(text, "shop_adaptive_in_flight_limit")
	if !ok1 || !ok2 {
		t.Fatalf("/metrics has no adaptive gauges:\n%s", text)
	}
	return capacity, limit
}

// With the policy's overload stages made adaptive (exampletest.Adaptive,
// as policy.yaml's comments say) the shedder's capacity is learnt, not
// fixed: it starts at 8, and under a load of slow reads beyond it (48 at
// once, 200ms each, long enough that a noisy machine's jitter is small
// beside it) the shedder sheds the excess at first and then raises its
// capacity, which /metrics shows; payments (critical) are never refused
// meanwhile. It runs without a cpu_target, on latency alone: on a shared
// machine the container's CPU is busy with other work, and the CPU signal
// would rightly hold the capacity where it is. The load is bounded: at
// most 200 rounds, at most 15 s.
func TestHTTPExampleAdaptive(t *testing.T) {
	policy := exampletest.PolicyWith(t, "../policy.yaml", "", slices.Concat(exampletest.ExemptLoopback, exampletest.Adaptive)...)
	out := exampletest.Start(t, run, "-addr", "127.0.0.1:0", "-metrics-addr", "127.0.0.1:0", "-policy", policy,
		"-work", "200ms", "-redis", "")
	api := out.WaitFor(t, listening, 1, 10*time.Second)[1]
	metrics := out.WaitFor(t, metricsAt, 1, time.Second)[1]
	capacity0, limit0 := adaptiveGauges(t, metrics)
	if capacity0 != 8 {
		t.Fatalf("adaptive shedder capacity at start: %v, want 8", capacity0)
	}

	// A client of its own, whose idle connections (and any it dialled but
	// never used, which the server's Shutdown would wait 5 s for) are
	// closed before the server stops.
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}}
	defer client.CloseIdleConnections()

	const reads, payments = 48, 2
	var shed, served, refusedPayments int
	capacity, limit := capacity0, limit0
	deadline := time.Now().Add(15 * time.Second)
	for round := 0; round < 200 && time.Now().Before(deadline) && capacity <= capacity0; round++ {
		codes := make([]int, reads+payments)
		var wg sync.WaitGroup
		for i := range codes {
			wg.Go(func() {
				method, path := "GET", "/v1/items/"+strconv.Itoa(i)
				if i >= reads {
					method, path = "POST", "/v1/payments"
				}
				req, err := http.NewRequest(method, api+path, nil)
				if err != nil {
					t.Error(err)
					return
				}
				resp, err := client.Do(req)
				if err != nil {
					t.Error(err)
					return
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				codes[i] = resp.StatusCode
			})
		}
		wg.Wait()
		for i, c := range codes {
			switch {
			case i >= reads && c != http.StatusCreated:
				refusedPayments++
			case i >= reads:
			case c == http.StatusOK:
				served++
			case c == http.StatusServiceUnavailable || c == http.StatusTooManyRequests:
				shed++
			default:
				t.Fatalf("read got %d", c)
			}
		}
		capacity, limit = adaptiveGauges(t, metrics)
	}
	t.Logf("reads: %d served, %d refused; shedder capacity %v -> %v, in-flight limit %v -> %v", served, shed, capacity0, capacity, limit0, limit)
	if shed == 0 {
		t.Errorf("no read was refused: the load never exceeded the starting capacity")
	}
	if capacity <= capacity0 {
		t.Errorf("the adaptive shedder's capacity stayed at %v under load the service kept up with; want it raised", capacity)
	}
	if refusedPayments > 0 {
		t.Errorf("%d critical payments refused, want none", refusedPayments)
	}
}
