package main

import (
	"context"
	"fmt"
	"time"

	"github.com/floodgate-go/floodgate/quota"
	"github.com/floodgate-go/floodgate/tiers"
	"github.com/floodgate-go/floodgate/tiers/redisstore"
)

// readCount reads, after a run, what Redis's counting rule (-count) was
// charged over every principal, by a take of cost 0 (which charges
// nothing) of each principal's bucket: its capacity less the remaining it
// reports. For a token bucket, remaining is the tokens left: the rule
// refills 1 unit an hour, less than one unit over any run, so the count is
// exact. For a window algorithm, remaining is the limit less the window's
// count (fixed_window: L − count; sliding_window_counter: L − the weighted
// count, prev × (W − e)/W + curr, where prev is 0 while the run lies in
// one window of the rule): the count itself, exact as long as every unit
// was charged in the window the read is in. The rule's window is
// countWindow (366 days, aligned on the Unix epoch), so a run crossing its
// boundary is refused rather than read wrong; first is the run's first
// decision (Unix ns).
func readCount(ctx context.Context, cfg config, t *fleetTarget, prefix string, s spec, first int64) (uint64, error) {
	if windowed(cfg.alg) && first != 0 {
		if windowsTouched(first, time.Now().UnixNano(), countWindow) != 1 {
			return 0, fmt.Errorf("the counting rule's %s window (%s) ended within the run: its count holds only what was charged since", countWindow, cfg.alg)
		}
	}
	c := t.newClient()
	defer c.Close()
	rs, err := redisstore.New(c, redisstore.WithBatching(0, 0))
	if err != nil {
		return 0, err
	}
	defer rs.Close()
	var mode quota.Consistency
	if err := mode.UnmarshalText([]byte(s.mode)); err != nil {
		return 0, err
	}
	var onErr quota.FailMode
	if err := onErr.UnmarshalText([]byte(cfg.onErr)); err != nil {
		return 0, err
	}
	lim, err := tiers.NewLimiter(rs, policyFor(levelsFor(s.levels, cfg.rate, cfg.burst, cfg.keys), cfg.alg, mode, cfg.sync, onErr, true), tiers.WithKeyPrefix(prefix))
	if err != nil {
		return 0, err
	}
	var total uint64
	for k := range cfg.keys {
		req := request(k)
		var b *quota.Bucket
		bs := lim.Buckets(nil, &req)
		for i := range bs {
			if bs[i].Rule == countRule {
				b = &bs[i]
			}
		}
		if b == nil {
			return 0, fmt.Errorf("principal %d has no %q bucket", k, countRule)
		}
		one := []quota.Bucket{*b}
		one[0].Cost = 0
		one[0].Consistency = quota.Exact
		res := make([]quota.Result, 1)
		if _, err := rs.Take(ctx, one, res); err != nil {
			return 0, err
		}
		total += uint64(countCapacity - res[0].Remaining)
	}
	return total, nil
}
