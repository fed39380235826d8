package history

import (
	"context"
	"errors"
	"time"

	"github.com/floodgate-go/floodgate/quota"
)

// errNoReporter is Report's and Resolve's error over a store that takes no
// report calls (which makes the Recorder's user, package fallback, find no
// ledger in the first place: see Recorder.Report).
var errNoReporter = errors.New("history: the recorded store takes no report calls")

// pendingReport is one bucket of a report call whose reply never came:
// when it was sent and what it asked to charge, until Resolve says what
// became of it.
type pendingReport struct {
	sent int64
	b    quota.Bucket
}

type reportKey struct {
	instance, seq uint64
	key           string
}

// Report implements quota.Reporter: it passes the call on to the store it
// wraps (which must be a Reporter; the fallback that calls it checks
// every layer with quota.Layers) and records, while started, each bucket
// the call charged as a report Op of its own: the units charged (negative:
// given back), at some time between the call's sending and its reply,
// with the remaining count after it. A bucket the call left unknown (it
// failed) is kept until Resolve says whether it was applied. Only keys
// with a recorded take are recorded (not a warm-up's keys, taken before
// Start); the others count as skipped.
func (r *Recorder) Report(ctx context.Context, instance, seq uint64, buckets []quota.Bucket, res []quota.ReportResult) error {
	rep, ok := r.inner.(quota.Reporter)
	if !ok {
		return errNoReporter
	}
	if !r.on.Load() {
		return rep.Report(ctx, instance, seq, buckets, res)
	}
	sent := time.Now().UnixNano()
	err := rep.Report(ctx, instance, seq, buckets, res)
	answered := time.Now().UnixNano()
	r.mu.Lock()
	defer r.mu.Unlock()
	for i := range buckets {
		b := &buckets[i]
		switch {
		case !r.taken[b.Key]:
			r.skipped.Add(1) // no recorded take: not a key of the history
		case i < len(res) && res[i].Applied:
			r.ops = append(r.ops, Op{Proc: r.proc, Sent: sent, Answered: answered, Outcome: Allowed, Report: true,
				Buckets: []Bucket{{Key: b.Key, Limit: b.Limit, Cost: res[i].Charged, Allowed: true, Remaining: res[i].Remaining}}})
		case err != nil:
			if r.unresolved == nil {
				r.unresolved = make(map[reportKey]pendingReport)
			}
			r.unresolved[reportKey{instance, seq, b.Key}] = pendingReport{sent: sent, b: *b}
		}
	}
	return err
}

// Resolve implements quota.Reporter: it passes the call on and, for each
// bucket of a recorded call whose reply never came, records what Resolve
// found: a charge of known size at some time between the call's sending
// and this answer (no remaining count: Resolve gives none), or nothing
// when it was not applied (it never will be).
func (r *Recorder) Resolve(ctx context.Context, instance, seq uint64, buckets []quota.Bucket, res []quota.ReportResult) error {
	rep, ok := r.inner.(quota.Reporter)
	if !ok {
		return errNoReporter
	}
	err := rep.Resolve(ctx, instance, seq, buckets, res)
	if err != nil {
		return err
	}
	answered := time.Now().UnixNano()
	r.mu.Lock()
	defer r.mu.Unlock()
	for i := range buckets {
		k := reportKey{instance, seq, buckets[i].Key}
		p, ok := r.unresolved[k]
		if !ok {
			continue
		}
		delete(r.unresolved, k)
		if i < len(res) && res[i].Applied {
			r.ops = append(r.ops, Op{Proc: r.proc, Sent: p.sent, Answered: answered, Outcome: Allowed, Report: true, Resolved: true,
				Buckets: []Bucket{{Key: p.b.Key, Limit: p.b.Limit, Cost: res[i].Charged}}})
		}
	}
	return nil
}

// unresolvedOps are the report buckets whose outcome is still unknown, as
// report Ops of unknown outcome (r.mu held).
func (r *Recorder) unresolvedOps() []Op {
	now := time.Now().UnixNano()
	var ops []Op
	for _, p := range r.unresolved {
		ops = append(ops, Op{Proc: r.proc, Sent: p.sent, Answered: now, Outcome: Unknown, Report: true, Err: "report call unresolved",
			Buckets: []Bucket{{Key: p.b.Key, Limit: p.b.Limit, Cost: p.b.Cost}}})
	}
	return ops
}
