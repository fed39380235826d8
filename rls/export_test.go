package rls

import "context"

// WithManualTicks: the QuotaServer ticks only when the test calls Tick.
func WithManualTicks() QuotaOption { return func(c *quotaConfig) { c.manual = true } }

// Tick runs one tick of the QuotaServer.
func (q *QuotaServer) Tick() { q.tick(context.Background()) }
