package fleetconc

import (
	"context"
	"fmt"
	"strconv"
)

// Test-only views of a Limiter's state.

// FleetInFlight returns the number of live (unexpired) slots for key under
// the fleet cap named name, as Redis holds them now.
func (l *Limiter) FleetInFlight(ctx context.Context, name, key string) (int64, error) {
	for _, fl := range l.fleet {
		if fl.name != name {
			continue
		}
		var now int64
		if l.clock == nil {
			t, err := fl.client.Time(ctx).Result()
			if err != nil {
				return 0, fmt.Errorf("fleetconc: cap %q: %w", name, err)
			}
			now = t.UnixMilli()
		} else {
			now = l.clock.Now().UnixMilli()
		}
		n, err := fl.client.ZCount(ctx, fl.prefix+key, "("+strconv.FormatInt(now, 10), "+inf").Result()
		if err != nil {
			return 0, fmt.Errorf("fleetconc: cap %q: %w", name, err)
		}
		return n, nil
	}
	return 0, fmt.Errorf("fleetconc: no cap named %q", name)
}

// WaitedSlots returns how many fleet slots requests got after waiting in
// the queue (WithWait); a slot an acquire got at once is not counted.
func (l *Limiter) WaitedSlots() int64 { return l.wait.got.Load() }

// DefaultPrefix is PerKey.Prefix's default, for the tests that read the
// keys.
const DefaultPrefix = defaultPrefix
