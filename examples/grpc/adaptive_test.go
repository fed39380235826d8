package main

import (
	"context"
	"io"
	"net/http"
	"slices"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/floodgate-go/floodgate/examples/internal/exampletest"
	"github.com/floodgate-go/floodgate/internal/shoppb"
)

// adaptiveGauges reads what the adaptive stages have learnt from /metrics.
func adaptiveGauges(t *testing.T, metrics string) (capacity, limit float64) {
	t.Helper()
	resp, err := http.Get(metrics)
	if err != nil {
		t.Fatal(err)
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		t.Fatal(err)
	}
	capacity, ok1 := exampletest.Gauge(string(body), "shop_shedder_capacity")
	limit, ok2 := exampletest.Gauge(string(body), "shop_adaptive_in_flight_limit")
	if !ok1 || !ok2 {
		t.Fatalf("/metrics has no adaptive gauges:\n%s", body)
	}
	return capacity, limit
}

// With the policy's overload stages made adaptive (exampletest.Adaptive,
// as policy.yaml's comments say) the shedder's capacity is learnt, not
// fixed: it starts at 8, and under a load of slow searches beyond it (48
// at once, 200ms each, long enough that a noisy machine's jitter is small
// beside it) the shedder sheds the excess at first (UNAVAILABLE) and then
// raises its capacity, which /metrics shows; payments (critical) are never
// refused meanwhile. It runs without a cpu_target, on latency alone: on a
// shared machine the container's CPU is busy with other work, and the CPU
// signal would rightly hold the capacity where it is. The load is bounded:
// at most 200 rounds, at most 15 s.
func TestGRPCExampleAdaptive(t *testing.T) {
	policy := exampletest.PolicyWith(t, "../policy.yaml", "", slices.Concat(exampletest.ExemptLoopback, exampletest.Adaptive)...)
	out := exampletest.Start(t, run, "-addr", "127.0.0.1:0", "-metrics-addr", "127.0.0.1:0", "-policy", policy,
		"-work", "200ms", "-redis", "")
	addr := out.WaitFor(t, listening, 1, 10*time.Second)[1]
	metrics := out.WaitFor(t, metricsAt, 1, time.Second)[1]
	capacity0, limit0 := adaptiveGauges(t, metrics)
	if capacity0 != 8 {
		t.Fatalf("adaptive shedder capacity at start: %v, want 8", capacity0)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	shop := shoppb.NewShopClient(dial(t, addr))

	const searches, payments = 48, 2
	var shed, served, refusedPayments int
	capacity, limit := capacity0, limit0
	deadline := time.Now().Add(15 * time.Second)
	for round := 0; round < 200 && time.Now().Before(deadline) && capacity <= capacity0; round++ {
		errs := make([]error, searches+payments)
		var wg sync.WaitGroup
		for i := range errs {
			wg.Go(func() {
				if i >= searches {
					_, errs[i] = shop.Pay(ctx, &shoppb.PayRequest{AmountCents: 100})
					return
				}
				_, errs[i] = shop.Search(ctx, &shoppb.SearchRequest{Query: "lamp"})
			})
		}
		wg.Wait()
		for i, err := range errs {
			switch c := status.Code(err); {
			case i >= searches && err != nil:
				refusedPayments++
			case i >= searches:
			case err == nil:
				served++
			case c == codes.Unavailable || c == codes.ResourceExhausted:
				shed++
			default:
				t.Fatalf("search: %v", err)
			}
		}
		capacity, limit = adaptiveGauges(t, metrics)
	}
	t.Logf("searches: %d served, %d refused; shedder capacity %v -> %v, in-flight limit %v -> %v", served, shed, capacity0, capacity, limit0, limit)
	if shed == 0 {
		t.Errorf("no search was refused: the load never exceeded the starting capacity")
	}
	if capacity <= capacity0 {
		t.Errorf("the adaptive shedder's capacity stayed at %v under load the service kept up with; want it raised", capacity)
	}
	if refusedPayments > 0 {
		t.Errorf("%d critical payments refused, want none", refusedPayments)
	}
}
