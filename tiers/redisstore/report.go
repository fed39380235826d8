package redisstore

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"strconv"

	"github.com/floodgate-go/floodgate/quota"
	"github.com/redis/go-redis/v9"
)

//go:embed report.lua
var reportSrc string

// reportScript runs report.lua over one call's keys, all in one slot;
// reportNodeScript runs the calls of several slots of one cluster node
// at once (Redis 7's allow-cross-slot-keys; see report.lua's end).
var (
	reportScript     = newScript("local NODE = false\n", logSrc, stateSrc, reportSrc)
	reportNodeScript = crossSlot(newScript("local NODE = true\n", logSrc, stateSrc, reportSrc))
)

var _ quota.Reporter = (*Store)(nil)

// recordTTLArg is quota.ReportRecordTTL in ms, as report.lua takes it.
var recordTTLArg any = strconv.FormatInt(quota.ReportRecordTTL.Milliseconds(), 10)

// Pre-boxed report.lua modes.
var (
	modeReport  any = "r"
	modeResolve any = "v"
)

// maxReportCall bounds the buckets of one report.lua call (Lua's unpack
// has a stack limit).
const maxReportCall = 256

// Report implements quota.Reporter by report.lua: each token bucket or
// GCRA bucket is charged up to its Cost, as many units as it holds with
// the arithmetic of a take of that many (an absent bucket is full), each
// window algorithm's bucket its Cost in the window that holds its
// Admitted time, nothing once that window is over (quota.Reporter's
// arithmetic, as memstore's), and the call is recorded next
// to its first bucket's key (the key, ":rc:", the instance and seq in
// hex: in that key's cluster slot) for quota.ReportRecordTTL, as "1" or
// with what each bucket could not be charged. Time is Redis TIME, or the
// WithClock time. One call per cluster slot (each atomic and recorded on
// its own; every key needs a hash tag, as package tiers writes them, else
// the call is refused) and per 256 buckets; on a Cluster the calls of one
// master go as one script call (Redis 7; per slot on older masters), and
// all of them in one pipeline: one round trip per master. The results of
// the calls that succeeded are filled when others fail. A call is never
// retried here: one that failed may or may not have been applied, which
// Resolve, with the same buckets in the same order, tells. Bad input is
// refused with quota.ValidateReport's error before any round trip.
func (s *Store) Report(ctx context.Context, instance, seq uint64, buckets []quota.Bucket, res []quota.ReportResult) error {
	return s.reportCalls(ctx, modeReport, instance, seq, buckets, res)
}

// Resolve implements quota.Reporter: per script call Report made of these
// buckets (grouped the same way), it reads the call's record: applied,
// and what it charged of each bucket; or, without a record, writes one
// that makes the call, should it reach Redis later, change nothing.
func (s *Store) Resolve(ctx context.Context, instance, seq uint64, buckets []quota.Bucket, res []quota.ReportResult) error {
	return s.reportCalls(ctx, modeResolve, instance, seq, buckets, res)
}

// reportCalls runs report.lua in mode over buckets, one call per slot
// and per maxReportCall buckets.
func (s *Store) reportCalls(ctx context.Context, mode any, instance, seq uint64, buckets []quota.Bucket, res []quota.ReportResult) error {
	if err := quota.ValidateReport(instance, buckets, res); err != nil {
		return err
	}
	clear(res[:len(buckets)])
	if len(buckets) == 0 {
		return nil
	}
	if s.cache != nil && mode == modeReport {
		for i := range buckets {
			if buckets[i].Cost < 0 {
				// Units given back (a lease returned) lift a denial, as
				// a Settle giving units back does.
				defer s.cache.liftDenials(buckets)
				break
			}
		}
	}
	var now int64
	fixed := s.clock != nil
	if fixed {
		now = s.clock.Now().UnixMicro()
	}
	all := make([]int, len(buckets))
	for i := range all {
		all[i] = i
	}
	groups := [][]int{all}
	if s.cluster != nil {
		for _, b := range buckets {
			if len(hashTag(b.Key)) == len(b.Key) {
				return fmt.Errorf("redisstore: report: key %q has no hash tag, which a Cluster needs to keep the call's record in its slot", b.Key)
			}
		}
		groups = s.bySlot(buckets, all)
	}
	var calls [][]int
	for _, g := range groups {
		for len(g) > 0 {
			k := min(len(g), maxReportCall)
			calls = append(calls, g[:k])
			g = g[k:]
		}
	}
	// The calls go at once, in one pipeline when there are several (see
	// runScripts), on a cluster each master's merged into one (see
	// reportNodes): one round trip per master, not one per slot. Each is
	// still atomic and recorded on its own.
	cs := make([]*call, len(calls))
	for j, idx := range calls {
		c := s.pool.Get().(*call)
		c.now, c.fixed = now, fixed
		c.buildReport(s.prefix, mode, instance, seq, buckets, idx, s.minArg, s.cluster != nil)
		c.kind = kindReport
		cs[j] = c
	}
	defer func() {
		for _, c := range cs {
			s.release(c)
		}
	}()
	errs := make([]error, len(calls))
	if s.cluster != nil && len(cs) > 1 && !s.noNodeReport.Load() {
		s.reportNodes(ctx, mode, buckets, calls, cs, res, errs)
	} else {
		cmds, cerrs := runScripts(ctx, s.client, cs, s.keyPos(), redis.NewIntSliceCmd)
		for j := range cs {
			errs[j] = reportResult(mode, cmds[j].Val(), cerrs[j], buckets, calls[j], res)
		}
	}
	return errors.Join(errs...)
}

// reportNodes sends the report.lua calls cs (of the buckets calls[j]) of
// a Report or Resolve on a cluster with the calls of each master merged
// into node calls (reportNodeScript, up to maxNodeKeys keys each), one
// script call per master instead of one per slot, and writes each call's
// results and error (errs[j]). A node call that meets a key its master no
// longer serves (a slot moved since the client read the slot map) fails
// before it wrote anything, and where Redis cannot run reportNodeScript
// (older than 7) it fails to compile: either way its calls go again on
// their own, in a second pipeline, following the redirections.
func (s *Store) reportNodes(ctx context.Context, mode any, buckets []quota.Bucket, calls [][]int, cs []*call, res []quota.ReportResult, errs []error) {
	type send struct {
		c       *call
		members []int // indexes into cs; one: c is that call
		keys    int
	}
	var sends []send
	open := map[*redis.Client]int{} // a master's node call still taking members
	for j, c := range cs {
		m, err := s.cluster.MasterForKey(ctx, c.args[keysAt].(string))
		if err != nil {
			sends = append(sends, send{c: c, members: []int{j}})
			continue
		}
		if k, ok := open[m]; ok && sends[k].keys+c.n+1 <= maxNodeKeys {
			sends[k].members = append(sends[k].members, j)
			sends[k].keys += c.n + 1
			continue
		}
		open[m] = len(sends)
		sends = append(sends, send{c: c, members: []int{j}, keys: c.n + 1})
	}
	sent := make([]*call, len(sends))
	for k := range sends {
		if len(sends[k].members) > 1 {
			sends[k].c = buildReportNode(cs, sends[k].members)
		}
		sent[k] = sends[k].c
	}
	cmds, cerrs := runScripts(ctx, s.client, sent, s.keyPos(), redis.NewIntSliceCmd)
	var again []int // calls of node calls that go again on their own
	for k, sd := range sends {
		err := cerrs[k]
		if len(sd.members) == 1 {
			j := sd.members[0]
			errs[j] = reportResult(mode, cmds[k].Val(), err, buckets, calls[j], res)
			continue
		}
		if notLocal(err) || noNodeScript(err) {
			if noNodeScript(err) {
				s.noNodeReport.Store(true)
			} else {
				s.cluster.ReloadState(ctx)
			}
			again = append(again, sd.members...)
			continue
		}
		vals := cmds[k].Val()
		for _, j := range sd.members {
			var part []int64
			if err == nil {
				if len(vals) == 0 || vals[0] < 0 || int(vals[0]) >= len(vals) {
					err = fmt.Errorf("redisstore: report.lua replied %d values to a node call of %d calls", len(cmds[k].Val()), len(sd.members))
				} else {
					part, vals = vals[1:1+vals[0]], vals[1+vals[0]:]
				}
			}
			errs[j] = reportResult(mode, part, err, buckets, calls[j], res)
		}
	}
	if len(again) == 0 {
		return
	}
	acs := make([]*call, len(again))
	for a, j := range again {
		acs[a] = cs[j]
	}
	cmds, cerrs = runScripts(ctx, s.client, acs, s.keyPos(), redis.NewIntSliceCmd)
	for a, j := range again {
		errs[j] = reportResult(mode, cmds[a].Val(), cerrs[a], buckets, calls[j], res)
	}
}

// buildReportNode returns the node call of the report.lua calls
// cs[members], all of one cluster node (see report.lua's end):
//
//	EVALSHA sha 1 routekey now minttl recordttl mode G (n key... record buckets)...
//
// Its declared key, which routes it, is the first call's record key.
func buildReportNode(cs []*call, members []int) *call {
	first := cs[members[0]]
	n0 := first.n
	nc := &call{kind: kindReportNode}
	nc.args = append(nc.args, "evalsha", reportNodeScript.shaArg, "1", string(first.bufs[n0+1].b))
	// now, minttl, recordttl, mode: the same in every call of a Report
	nc.args = append(nc.args, first.args[4+n0:8+n0]...)
	nc.args = append(nc.args, strconv.Itoa(len(members)))
	for _, j := range members {
		c := cs[j]
		nc.args = append(nc.args, strconv.Itoa(c.n))
		nc.args = append(nc.args, c.args[3:3+c.n+1]...) // the keys, then the record key
		nc.args = append(nc.args, c.args[8+c.n])
	}
	return nc
}

// reportResult fills res for the buckets idx of one report.lua call from
// its reply (out) or returns its error (err).
func reportResult(mode any, out []int64, err error, buckets []quota.Bucket, idx []int, res []quota.ReportResult) error {
	if err != nil {
		if mode == modeResolve {
			return fmt.Errorf("redisstore: Resolve: %w", err)
		}
		return fmt.Errorf("redisstore: Report (not retried; it may or may not have been applied: see Resolve): %w", err)
	}
	switch {
	case len(out) == 1 && out[0] == 0: // not applied
		return nil
	case mode == modeResolve && len(out) == 1 && out[0] == 1:
		for _, i := range idx {
			res[i] = quota.ReportResult{Applied: true, Charged: buckets[i].Cost}
		}
		return nil
	case mode == modeResolve && len(out) == 1+len(idx) && out[0] == 1:
		for j, i := range idx {
			res[i] = quota.ReportResult{Applied: true, Charged: buckets[i].Cost - out[1+j]}
		}
		return nil
	case mode == modeReport && len(out) == 1+2*len(idx) && out[0] == 1:
		for j, i := range idx {
			res[i] = quota.ReportResult{Applied: true, Charged: out[1+2*j], Remaining: out[2+2*j]}
		}
		return nil
	}
	return fmt.Errorf("redisstore: report.lua (mode %v) replied %d values for %d buckets", mode, len(out), len(idx))
}

// buildReport lays out a report.lua call:
//
//	EVALSHA sha numkeys key... record now minttl recordttl mode buckets
//
// over buckets idx, at c.now if c.fixed (else now is "": Redis TIME).
// With cluster, the first key is also passed as a plain string so the
// cluster client can route by it.
func (c *call) buildReport(prefix string, mode any, instance, seq uint64, buckets []quota.Bucket, idx []int, minArg []byte, cluster bool) {
	n := len(idx)
	c.n = n
	c.putInt(int64(n + 1))
	for _, i := range idx {
		c.putKey(prefix, buckets[i].Key)
	}
	c.put(func(b []byte) []byte {
		b = append(b, prefix...)
		b = append(b, buckets[idx[0]].Key...)
		b = append(b, ":rc:"...)
		b = strconv.AppendUint(b, instance, 16)
		b = append(b, ':')
		return strconv.AppendUint(b, seq, 16)
	})
	if c.fixed {
		c.putInt(c.now)
	}
	c.put(func(b []byte) []byte { return append(b, minArg...) })
	c.put(func(b []byte) []byte {
		b = appendF64(b, int64(n))
		for _, i := range idx {
			b = appendLimit(b, &buckets[i])
			var at int64 // token bucket and GCRA: none
			if !buckets[i].Admitted.IsZero() {
				at = buckets[i].Admitted.UnixMicro()
			}
			b = appendF64(b, at)
			var s0, s1 int64 // no calendar window
			if sp := buckets[i].Span; !sp.IsZero() {
				s0, s1 = sp.Start.UnixMicro(), sp.End.UnixMicro()
			}
			b = appendF64(appendF64(b, s0), s1)
		}
		return b
	})
	c.finish()
	c.args = append(c.args, "evalsha", reportScript.shaArg)
	for k := 0; k <= n+1; k++ {
		c.args = append(c.args, &c.bufs[k])
	}
	if cluster {
		c.args[3] = string(c.bufs[1].b)
	}
	k := n + 2
	if c.fixed {
		c.args = append(c.args, &c.bufs[k])
		k++
	} else {
		c.args = append(c.args, "")
	}
	c.args = append(c.args, &c.bufs[k], recordTTLArg, mode, &c.bufs[k+1])
}
