package stack

import (
	"context"
	"fmt"
	"log/slog"

	"go.opentelemetry.io/otel/metric"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/concurrency"
	"github.com/floodgate-go/floodgate/shedder"
	"github.com/floodgate-go/floodgate/shedder/cpu"
)

// Adaptive returns the -adaptive stages: a shedder whose capacity starts
// at 8 and follows the service (latency and throughput, and, when
// cpuTarget is above 0, the container's CPU against its cgroup quota or
// its CPUs: at cpuTarget of it the service counts as overloaded), and an
// adaptive in-flight limit (Gradient2) that never refuses critical calls.
// Both are counted by the observer like the stack's stages, and what they
// learnt is exported on /metrics as two gauges, read at every scrape:
//
//	shop_adaptive_shedder_capacity  the adaptive shedder's capacity
//	shop_adaptive_in_flight_limit   the adaptive in-flight limit
func (s *Stack) Adaptive(logger *slog.Logger, cpuTarget float64) (shed, conc floodgate.Admitter, err error) {
	capacity := shedder.AdaptiveCapacity{Min: 8, Max: 4 * ShedCapacity}
	if cpuTarget <= 0 {
		logger.Info("adaptive shedder without a CPU signal", "reason", "-cpu-target 0: latency alone")
	} else if m, err := cpu.New(); err == nil {
		capacity.CPU, capacity.CPUTarget = m, cpuTarget
		logger.Info("adaptive shedder: CPU signal", "source", m.Source(), "target", cpuTarget)
	} else {
		logger.Info("adaptive shedder without a CPU signal", "reason", err)
	}
	sh, err := shedder.New(capacity.Min, shedder.WithAdaptiveCapacity(capacity))
	if err != nil {
		return nil, nil, err
	}
	a, err := concurrency.NewAdaptive(concurrency.AdaptiveConfig{Min: 8, Max: MaxInFlight, Bypass: floodgate.PriorityCritical})
	if err != nil {
		return nil, nil, err
	}
	meter := s.MeterProvider.Meter("github.com/floodgate-go/floodgate/examples/internal/stack")
	capGauge, err := meter.Int64ObservableGauge("shop.adaptive.shedder_capacity",
		metric.WithDescription("The adaptive shedder's capacity, in requests in flight."))
	if err != nil {
		return nil, nil, fmt.Errorf("adaptive metrics: %w", err)
	}
	limitGauge, err := meter.Int64ObservableGauge("shop.adaptive.in_flight_limit",
		metric.WithDescription("The adaptive in-flight limit (Gradient2)."))
	if err != nil {
		return nil, nil, fmt.Errorf("adaptive metrics: %w", err)
	}
	reg, err := meter.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		o.ObserveInt64(capGauge, sh.Capacity())
		o.ObserveInt64(limitGauge, a.Limit())
		return nil
	}, capGauge, limitGauge)
	if err != nil {
		return nil, nil, fmt.Errorf("adaptive metrics: %w", err)
	}
	s.closer = append(s.closer, func(context.Context) error { return reg.Unregister() })
	return s.Observer.TrackInFlight(sh), s.Observer.TrackInFlight(a), nil
}
