package history

import (
	"fmt"
	"strings"
	"time"

	"github.com/floodgate-go/floodgate/quota"
)

// Outcome is what a take answered.
type Outcome uint8

// Outcomes.
const (
	// Denied: the store answered and charged nothing.
	Denied Outcome = iota
	// Allowed: the store answered and charged every bucket.
	Allowed
	// Unknown: the take failed (an error or a timeout); it may or may not
	// have been applied.
	Unknown
)

// String returns "denied", "allowed" or "unknown".
func (o Outcome) String() string {
	switch o {
	case Denied:
		return "denied"
	case Allowed:
		return "allowed"
	case Unknown:
		return "unknown"
	}
	return fmt.Sprintf("outcome(%d)", uint8(o))
}

// Bucket is one bucket of a recorded take and, when the take was
// answered, what the store said of it.
type Bucket struct {
	Key   string
	Limit quota.Limit
	Cost  int64
	// Allowed and Remaining are the bucket's Result (meaningless when the
	// take's outcome is Unknown).
	Allowed   bool  `json:",omitempty"`
	Remaining int64 `json:",omitempty"`
}

// Op is one recorded take.
type Op struct {
	// Proc is the process that made the take.
	Proc int
	// Sent and Answered are the process's wall clock, in Unix
	// nanoseconds, before the take was sent and after it returned.
	Sent, Answered int64
	// Now is the Redis time the take's script used, in Unix microseconds;
	// 0 when unknown.
	Now     int64 `json:",omitempty"`
	Outcome Outcome
	Buckets []Bucket
	// Err is the error of a take of unknown outcome.
	Err string `json:",omitempty"`
	// Report makes the op a report call's charge to its one bucket
	// (quota.Reporter, the path package fallback charges its local admits
	// on), not a take: Cost units charged (negative: given back, up to the
	// capacity), at some time in [Sent, Answered], which never denies.
	// With Outcome Allowed the charge was applied and, unless Resolved,
	// Remaining is what the bucket held after it; with Unknown it may have
	// been applied, once, at any time after Sent.
	Report bool `json:",omitempty"`
	// Resolved: the charge was learned from a Resolve call (the report's
	// reply never came): no remaining count.
	Resolved bool `json:",omitempty"`
}

// Reset is a restart of Redis that lost its data: every bucket is empty
// (full) after some point between From and To (Unix nanoseconds: when it
// was killed, and when the new server answered).
//
// With Keys set it is a failover instead (a Redis Cluster master killed
// and its replica promoted, From the kill and To the promotion): only the
// buckets named (the dead master's) changed, at some point between From
// and To, each to any state between the one it had and empty (full). The
// replica lacked some of the charges the dead master had applied (it
// replicates asynchronously) and none it had not; how many is not known,
// so the model allows any number of them lost. Takes of unknown outcome
// sent before it keep counting as possibly applied.
type Reset struct {
	From, To int64
	Keys     []string `json:",omitempty"`
}

// History is the merged record of a run.
type History struct {
	Ops    []Op
	Resets []Reset
}

// String describes o on one line.
func (o *Op) String() string {
	var b strings.Builder
	if o.Report {
		b.WriteString("report ")
	}
	fmt.Fprintf(&b, "proc %d %s sent %s answered %s (+%s)", o.Proc, o.Outcome, stamp(o.Sent), stamp(o.Answered), time.Duration(o.Answered-o.Sent))
	if o.Now != 0 {
		fmt.Fprintf(&b, " redis time %s", stamp(o.Now*1000))
	}
	for _, bk := range o.Buckets {
		fmt.Fprintf(&b, "; %s %s %d/%s burst %d cost %d", bk.Key, bk.Limit.Algorithm, bk.Limit.Rate, bk.Limit.Period, bk.Limit.Burst, bk.Cost)
		if o.Outcome != Unknown {
			fmt.Fprintf(&b, " -> %s remaining %d", map[bool]string{true: "allow", false: "deny"}[bk.Allowed], bk.Remaining)
		}
	}
	if o.Err != "" {
		fmt.Fprintf(&b, "; error %q", o.Err)
	}
	return b.String()
}

// stamp formats Unix nanoseconds as a UTC time of day to the microsecond.
func stamp(ns int64) string {
	return time.Unix(0, ns).UTC().Format("15:04:05.000000")
}
