package main

import (
	"context"
	"fmt"

	"github.com/floodgate-go/floodgate/quota"
	"github.com/floodgate-go/floodgate/tiers"
	"github.com/floodgate-go/floodgate/tiers/redisstore"
)

// readCount reads, after a run, what Redis's counting rule (-count) was
// charged over every principal: its capacity less what its bucket holds,
// read by a take of cost 0 (which charges nothing). The rule refills 1 unit
// an hour, less than one unit over any run, so the count is exact.
func readCount(ctx context.Context, cfg config, t *fleetTarget, prefix string, s spec) (uint64, error) {
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
	lim, err := tiers.NewLimiter(rs, policyFor(levelsFor(s.levels, cfg.rate, cfg.burst, cfg.keys), mode, cfg.sync, onErr, true), tiers.WithKeyPrefix(prefix))
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
