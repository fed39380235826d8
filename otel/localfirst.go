package otel

import (
	"context"
	"errors"

	"go.opentelemetry.io/otel/metric"

	"github.com/floodgate-go/floodgate/tiers/localfirst"
)

// ObserveLocalFirst exports the counters of a local-first store (package
// tiers/localfirst) as metrics, read from stats at every collection:
//
//	floodgate.localfirst.leases          counter  {lease}   leases granted
//	floodgate.localfirst.leased_units    counter  {unit}    units leased
//	floodgate.localfirst.returned_units  counter  {unit}    unspent units given back
//	floodgate.localfirst.reports         counter  {report}  async reports that reached the store
//	floodgate.localfirst.reported_units  counter  {unit}    units they charged
//	floodgate.localfirst.debt_units      counter  {unit}    units admitted that the store had no room for
//	floodgate.localfirst.sync.batch_size gauge    {call}    reports and returns of the last sync
//	floodgate.localfirst.sync.lag        gauge    s         the longest a due report waited
//	floodgate.localfirst.keys            gauge    {key}     keys held locally
//
// Pass the store's Stats method: obs.ObserveLocalFirst(lf.Stats). The
// returned func unregisters the callback. Errors creating instruments go
// to otel.Handle, as in New.
func (o *Observer) ObserveLocalFirst(stats func() localfirst.Stats) (unregister func(), err error) {
	if stats == nil {
		return func() {}, errors.New("otel: ObserveLocalFirst: nil stats func")
	}
	m := o.meter
	counter := func(name, unit, desc string) metric.Int64ObservableCounter {
		return instrument[metric.Int64ObservableCounterOption](m, metric.Meter.Int64ObservableCounter, name,
			metric.WithUnit(unit), metric.WithDescription(desc))
	}
	gauge := func(name, unit, desc string) metric.Int64ObservableGauge {
		return instrument[metric.Int64ObservableGaugeOption](m, metric.Meter.Int64ObservableGauge, name,
			metric.WithUnit(unit), metric.WithDescription(desc))
	}
	leases := counter("floodgate.localfirst.leases", "{lease}", "Leases granted to this instance by the store.")
	leased := counter("floodgate.localfirst.leased_units", "{unit}", "Units leased from the store.")
	returned := counter("floodgate.localfirst.returned_units", "{unit}", "Leased units given back unspent.")
	reports := counter("floodgate.localfirst.reports", "{report}", "Async reports that reached the store.")
	reported := counter("floodgate.localfirst.reported_units", "{unit}", "Units async reports charged.")
	debt := counter("floodgate.localfirst.debt_units", "{unit}", "Units admitted locally that the store had no room for when reported.")
	batch := gauge("floodgate.localfirst.sync.batch_size", "{call}", "Reports and lease returns the last sync sent.")
	lagGauge := instrument[metric.Float64ObservableGaugeOption](m, metric.Meter.Float64ObservableGauge, "floodgate.localfirst.sync.lag",
		metric.WithUnit("s"), metric.WithDescription("The longest an async report waited past the moment it fell due."))
	keys := gauge("floodgate.localfirst.keys", "{key}", "Keys held locally by the local-first store.")
	reg, err := m.RegisterCallback(func(_ context.Context, obs metric.Observer) error {
		st := stats()
		obs.ObserveInt64(leases, int64(st.Leases))
		obs.ObserveInt64(leased, int64(st.LeasedUnits))
		obs.ObserveInt64(returned, int64(st.ReturnedUnits))
		obs.ObserveInt64(reports, int64(st.Reports))
		obs.ObserveInt64(reported, int64(st.ReportedUnits))
		obs.ObserveInt64(debt, int64(st.DebtUnits))
		obs.ObserveInt64(batch, int64(st.LastBatch))
		obs.ObserveFloat64(lagGauge, st.MaxSyncLag.Seconds())
		obs.ObserveInt64(keys, int64(st.Keys))
		return nil
	}, leases, leased, returned, reports, reported, debt, batch, lagGauge, keys)
	if err != nil {
		handle(err)
		return func() {}, nil
	}
	return func() { _ = reg.Unregister() }, nil
}
