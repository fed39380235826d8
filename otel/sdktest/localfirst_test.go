package sdktest

import (
	"testing"
	"time"

	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/floodgate-go/floodgate/tiers/localfirst"
)

// TestObserveLocalFirst: the local-first store's counters are exported as
// the documented instruments, read at collection, and stop after
// unregister.
func TestObserveLocalFirst(t *testing.T) {
	h := newHarness(t)
	st := localfirst.Stats{Leases: 3, LeasedUnits: 40, ReturnedUnits: 7, Reports: 11, ReportedUnits: 90, DebtUnits: 2,
		LastBatch: 5, MaxSyncLag: 1500 * time.Microsecond, Keys: 12}
	unregister, err := h.obs.ObserveLocalFirst(func() localfirst.Stats { return st })
	if err != nil {
		t.Fatal(err)
	}
	ms := h.collect(t)
	for name, want := range map[string]string{
		"floodgate.localfirst.leases":         "3",
		"floodgate.localfirst.leased_units":   "40",
		"floodgate.localfirst.returned_units": "7",
		"floodgate.localfirst.reports":        "11",
		"floodgate.localfirst.reported_units": "90",
		"floodgate.localfirst.debt_units":     "2",
	} {
		m, ok := ms[name]
		if !ok {
			t.Errorf("%s not exported", name)
			continue
		}
		if got := intPoints[sum](t, m); len(got) != 1 || got[0] != "="+want {
			t.Errorf("%s = %v, want [%s]", name, got, want)
		}
	}
	for name, want := range map[string]string{"floodgate.localfirst.sync.batch_size": "5", "floodgate.localfirst.keys": "12"} {
		if got := intPoints[gauge](t, ms[name]); len(got) != 1 || got[0] != "="+want {
			t.Errorf("%s = %v, want [%s]", name, got, want)
		}
	}
	lag, ok := ms["floodgate.localfirst.sync.lag"].Data.(metricdata.Gauge[float64])
	if !ok || len(lag.DataPoints) != 1 || lag.DataPoints[0].Value != 0.0015 || ms["floodgate.localfirst.sync.lag"].Unit != "s" {
		t.Errorf("sync.lag = %+v", ms["floodgate.localfirst.sync.lag"])
	}
	unregister()
	if _, ok := h.collect(t)["floodgate.localfirst.leases"]; ok {
		t.Error("still exported after unregister")
	}
	if _, err := h.obs.ObserveLocalFirst(nil); err == nil {
		t.Error("nil stats func accepted")
	}
}
