package redisstore

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"strconv"
	"sync"

	"github.com/redis/go-redis/v9"

	"github.com/floodgate-go/floodgate/tiers"
)

//go:embed report.lua
var reportSrc string

var reportScript = newScript(reportSrc)

var _ tiers.Reporter = (*Store)(nil)

// markTTLArg is tiers.ReportMarkTTL in ms, as report.lua takes it.
var markTTLArg any = strconv.FormatInt(tiers.ReportMarkTTL.Milliseconds(), 10)

// maxReportCall bounds the reports of one report.lua call (its MGET reads
// two keys a report, and Lua's unpack has a stack limit).
const maxReportCall = 256

// Report implements tiers.Reporter by report.lua: each report counts what
// no earlier attempt of its instance counted, by a mark kept next to the
// bucket's key (the key, then ":r:" and the instance in hex, in the
// key's hash tag's slot) for tiers.ReportMarkTTL, and charges as many of
// those units as the bucket holds, with the arithmetic of a take of that
// many; an absent bucket is full. Time is Redis TIME, or the WithClock
// time. One script call per cluster slot (in parallel) and per 256
// reports, each atomic; the results of the calls that succeeded are
// filled when others fail. On a Cluster every key needs a hash tag (as
// package tiers writes them), so that its mark shares its slot; a key
// without one is refused. A report is never retried here: a call that
// failed may or may not have been applied, and sending it again with a
// new Seq is what makes that safe. Bad input is refused with
// tiers.ValidateReports's error before any round trip.
func (s *Store) Report(ctx context.Context, reports []tiers.Report, res []tiers.ReportResult) error {
	if err := tiers.ValidateReports(reports, res); err != nil {
		return err
	}
	for i := range reports {
		res[i] = tiers.ReportResult{}
	}
	if len(reports) == 0 {
		return nil
	}
	var now int64
	fixed := s.clock != nil
	if fixed {
		now = s.clock.Now().UnixMicro()
	}
	var groups [][]int
	if s.cluster != nil {
		bySlot := make(map[int]int, 4)
		for i := range reports {
			k := reports[i].Bucket.Key
			if t := hashTag(k); len(t) == len(k) {
				return fmt.Errorf("redisstore: Report: key %q has no hash tag, which a Cluster needs to keep its report mark in its slot", k)
			}
			sl := s.slotOf(k)
			g, ok := bySlot[sl]
			if !ok {
				g = len(groups)
				bySlot[sl] = g
				groups = append(groups, nil)
			}
			groups[g] = append(groups[g], i)
		}
	} else {
		all := make([]int, len(reports))
		for i := range all {
			all[i] = i
		}
		groups = [][]int{all}
	}
	var calls [][]int
	for _, g := range groups {
		for len(g) > 0 {
			k := min(len(g), maxReportCall)
			calls = append(calls, g[:k])
			g = g[k:]
		}
	}
	if len(calls) == 1 {
		return s.report(ctx, reports, calls[0], res, now, fixed)
	}
	errs := make([]error, len(calls))
	var wg sync.WaitGroup
	for j := range calls {
		wg.Go(func() { errs[j] = s.report(ctx, reports, calls[j], res, now, fixed) })
	}
	wg.Wait()
	return errors.Join(errs...)
}

// report runs report.lua once over reports idx (all in one slot).
func (s *Store) report(ctx context.Context, reports []tiers.Report, idx []int, res []tiers.ReportResult, now int64, fixed bool) error {
	c := s.pool.Get().(*call)
	defer s.release(c)
	c.now, c.fixed = now, fixed
	c.buildReport(s.prefix, reports, idx, s.minArg, s.cluster != nil)
	cmd, err := runScript(ctx, s.client, c, reportScript, s.keyPos(), redis.NewIntSliceCmd)
	if err != nil {
		return fmt.Errorf("redisstore: Report (not retried; it may or may not have been applied): %w", err)
	}
	out := cmd.Val()
	if len(out) != 5*len(idx) {
		return fmt.Errorf("redisstore: report.lua replied %d values for %d reports", len(out), len(idx))
	}
	for j, i := range idx {
		o := out[5*j:]
		res[i] = tiers.ReportResult{Applied: o[0] == 1, Counted: o[1], Charged: o[2], Acked: uint64(o[3]), Remaining: o[4]}
	}
	return nil
}

// buildReport lays out a report.lua call:
//
//	EVALSHA sha numkeys key... mark... now minttl markttl reports
//
// over reports idx, at c.now if c.fixed (else now is "": Redis TIME).
// With cluster, the first key is also passed as a plain string so the
// cluster client can route by it.
func (c *call) buildReport(prefix string, reports []tiers.Report, idx []int, minArg []byte, cluster bool) {
	n := len(idx)
	c.n = n
	c.putInt(int64(2 * n))
	for _, i := range idx {
		c.putKey(prefix, reports[i].Bucket.Key)
	}
	for _, i := range idx {
		r := &reports[i]
		c.put(func(b []byte) []byte {
			b = append(b, prefix...)
			b = append(b, r.Bucket.Key...)
			b = append(b, ":r:"...)
			return strconv.AppendUint(b, r.Instance, 16)
		})
	}
	if c.fixed {
		c.putInt(c.now)
	}
	c.put(func(b []byte) []byte { return append(b, minArg...) })
	c.put(func(b []byte) []byte {
		b = appendF64(b, int64(n))
		for _, i := range idx {
			r := &reports[i]
			b = appendLimit(b, &r.Bucket)
			b = appendF64(b, int64(r.Seq))
			b = appendF64(b, int64(r.Acked))
			b = appendF64(b, int64(r.Since))
		}
		return b
	})
	c.finish()
	c.args = append(c.args, "evalsha", reportScript.shaArg)
	for k := 0; k <= 2*n; k++ {
		c.args = append(c.args, &c.bufs[k])
	}
	if cluster {
		c.args[3] = string(c.bufs[1].b)
	}
	k := 2*n + 1
	if c.fixed {
		c.args = append(c.args, &c.bufs[k])
		k++
	} else {
		c.args = append(c.args, "")
	}
	c.args = append(c.args, &c.bufs[k], markTTLArg, &c.bufs[k+1])
}
