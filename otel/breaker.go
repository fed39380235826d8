package otel

import (
	"context"
	"fmt"
	"strings"
	"sync"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
)

var breakerStates = [...]string{BreakerClosed, BreakerHalfOpen, BreakerOpen}

// parseBreakerState accepts the state names above and gobreaker's
// State.String() spellings ("closed", "half-open", "open").
func parseBreakerState(s string) (int, error) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "closed":
		return 0, nil
	case "half_open", "half-open":
		return 1, nil
	case "open":
		return 2, nil
	}
	return 0, fmt.Errorf("unknown circuit breaker state %q (want closed, half_open or open)", s)
}

type breakerSet struct {
	mu    sync.Mutex
	max   int
	names []string // in first-seen order
	m     map[string]*breakerEntry
}

type breakerEntry struct {
	state int
	opts  [len(breakerStates)][]metric.ObserveOption
}

func newBreakerSet(max int) *breakerSet {
	return &breakerSet{max: max, m: make(map[string]*breakerEntry)}
}

// set records that breaker name is now in state and returns the name as
// recorded (otherValue beyond the cap).
func (b *breakerSet) set(name string, state int) string {
	b.mu.Lock()
	defer b.mu.Unlock()
	e, ok := b.m[name]
	if !ok {
		if len(b.m) >= b.max {
			name = otherValue
			e, ok = b.m[name]
		}
		if !ok {
			name = strings.Clone(name)
			e = &breakerEntry{}
			for i, st := range breakerStates {
				e.opts[i] = []metric.ObserveOption{metric.WithAttributeSet(attribute.NewSet(
					AttrBreaker.String(name), AttrBreakerState.String(st)))}
			}
			b.m[name] = e
			b.names = append(b.names, name)
		}
	}
	e.state = state
	return name
}

// observe is the floodgate.fallback.breaker.state callback.
func (b *breakerSet) observe(_ context.Context, o metric.Int64Observer) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, name := range b.names {
		e := b.m[name]
		for i := range breakerStates {
			var v int64
			if i == e.state {
				v = 1
			}
			o.Observe(v, e.opts[i]...)
		}
	}
	return nil
}

// BreakerStateChanged records that the circuit breaker called name moved
// from one state to another: floodgate.fallback.breaker.state then reports
// 1 for (name, to) and 0 for name's other states, and
// floodgate.fallback.breaker.transitions counts the change. States are
// "closed", "half_open" (or gobreaker's "half-open") and "open"; its
// signature fits gobreaker's OnStateChange once the states are turned into
// strings:
//
//	OnStateChange: func(name string, from, to gobreaker.State) {
//		obs.BreakerStateChanged(name, from.String(), to.String())
//	}
//
// Breaker names should be few (one per store); beyond 32 distinct names,
// further ones are recorded as "_other". An unknown state is reported to
// otel.Handle and the call is otherwise ignored.
func (o *Observer) BreakerStateChanged(name, from, to string) {
	f, err := parseBreakerState(from)
	if err != nil {
		handle(fmt.Errorf("BreakerStateChanged(%q): from: %w", name, err))
		return
	}
	t, err := parseBreakerState(to)
	if err != nil {
		handle(fmt.Errorf("BreakerStateChanged(%q): to: %w", name, err))
		return
	}
	name = o.breakers.set(name, t)
	o.breakerTransitions.Add(context.Background(), 1, metric.WithAttributes(
		AttrBreaker.String(name), AttrBreakerFrom.String(breakerStates[f]), AttrBreakerTo.String(breakerStates[t])))
}
