package fallback

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/sony/gobreaker/v2"

	"github.com/floodgate-go/floodgate/internal/cause"
	"github.com/floodgate-go/floodgate/quota"
)

// counters are the Store's statistics; see Stats.
type counters struct {
	calls, failures, timeouts, canceled, rejected atomic.Uint64
	slow                                          atomic.Uint64
	causes                                        [cause.N]atomic.Uint64
	takesAllowed, takesDenied                     atomic.Uint64
	modes                                         modeCounts
	transitions                                   [3]atomic.Uint64 // [to state]
	byRule                                        sync.Map         // rule name -> *modeCounts
	rules                                         atomic.Int64     // entries in byRule
	settled, settleFailed, settleDropped          atomic.Uint64
	localSettled                                  atomic.Uint64
	late, lateApplied, lateAnswered               atomic.Uint64
}

// modeCounts counts bucket decisions by [FailMode][allowed].
type modeCounts [3][2]atomic.Uint64

// maxRules bounds the rules counted separately in Stats.ByRule; decisions of
// further rule names are counted under OtherRule. Rule names come from the
// policy, so the bound only matters for buckets built by hand.
const maxRules = 1024

// rule returns the counters of the named rule, creating them on first use.
func (c *counters) rule(name string) *modeCounts {
	if v, ok := c.byRule.Load(name); ok {
		return v.(*modeCounts)
	}
	if c.rules.Load() >= maxRules {
		name = OtherRule
	}
	v, loaded := c.byRule.LoadOrStore(name, new(modeCounts))
	if !loaded {
		c.rules.Add(1)
	}
	return v.(*modeCounts)
}

// Stats is a snapshot of a Store's counters. Every Take that reaches the
// breaker is counted exactly once among Calls, and every bucket decided
// without the primary is counted once in Fallback by its mode and outcome.
type Stats struct {
	// State is the breaker's state now.
	State gobreaker.State
	// Calls is the number of Takes that reached the breaker.
	Calls uint64
	// Failures is the number of primary calls that failed (error or
	// timeout); Timeouts is the part of them that ran out of time (the
	// context's deadline, or a network deadline).
	Failures, Timeouts uint64
	// Budget is the call budget now of a take with no fail-closed
	// bucket: WithTimeout's, or more while the primary's answers take
	// longer (see WithTimeout).
	Budget time.Duration
	// Slow is the number of calls that ran out of their budget while the
	// primary kept answering others (WithSlowGrace): decided without the
	// primary but not counted against the breaker, nor in Failures.
	Slow uint64
	// Causes counts failed and slow calls by cause: CauseTimeout,
	// CauseRefused, CauseReset, CauseNoScript, CauseOOM, CauseRedirect,
	// CauseOther (absent when 0).
	Causes map[string]uint64
	// Canceled is the number of primary calls abandoned because the
	// caller's context ended; they do not count against the store.
	Canceled uint64
	// Rejected is the number of Takes the breaker did not let through
	// (open, or half-open with every probe slot taken).
	Rejected uint64
	// FallbackTakesAllowed and FallbackTakesDenied count the Takes decided
	// without the primary, by outcome.
	FallbackTakesAllowed, FallbackTakesDenied uint64
	// Fallback counts the buckets decided without the primary by their
	// mode, as the bucket itself answered: for a local bucket, Allowed
	// means its limiter had the tokens (the Take may still have denied
	// because of another bucket, in which case nothing was charged).
	Fallback [3]ModeCount
	// ByRule counts the same decisions by the bucket's rule
	// (quota.Bucket.Rule) and mode: ByRule["login"][quota.FailClosed].
	// Rules that never fell back are absent; at most 1024 rules are
	// counted by name, the rest under OtherRule.
	ByRule map[string][3]ModeCount
	// Opened, HalfOpened and Closed count breaker transitions into each
	// state.
	Opened, HalfOpened, Closed uint64
	// LocalBuckets is the number of local limiters held; Evictions counts
	// those dropped by the LRU bound.
	LocalBuckets int
	Evictions    uint64
	// Settled counts settlements (quota.Settler) the primary applied;
	// SettleFailed those it did not (error, timeout, or a primary that
	// cannot settle); SettleDropped those not sent because the breaker
	// was open; LocalSettled the buckets settled on their local limiter.
	Settled, SettleFailed, SettleDropped, LocalSettled uint64
	// Charged counts the units admitted locally that reports charged to
	// the primary (see Sync); Debt the part of them the primary's bucket
	// had no room for when reported (owed again, up to the share);
	// ReportFailures the report calls whose reply never came (resolved
	// later); GivenBack the units reports gave back (charges the primary
	// made for takes denied locally, see Late). Owed is the units not
	// charged or given back yet.
	// ChargeDropped counts units not recorded because as many keys as
	// WithLocalCapacity already owed; ChargeExpired units of window
	// algorithms not charged because the window they were admitted in
	// was over when the primary could be told (charging it cannot
	// matter). Units admitted over a primary that takes no report calls
	// (ChargesLocal false) are counted nowhere here.
	Charged, Debt, ReportFailures, GivenBack, Owed, ChargeDropped, ChargeExpired uint64
	// Late counts takes decided locally whose call to the primary, run
	// in the background (see "Late answers" in the package
	// documentation), answered after the decision; LateApplied the part
	// of them the primary allowed, and so charged: matched with the local
	// decision so that the store ends charged once for what was admitted.
	// LateAnswered counts takes the local limiters denied that waited
	// for the primary's late answer and got it: the store decided them
	// (they are also counted in Fallback as denied locally).
	Late, LateApplied, LateAnswered uint64
}

func (mc *modeCounts) snapshot() (out [3]ModeCount) {
	for m := range out {
		out[m] = ModeCount{Allowed: mc[m][1].Load(), Denied: mc[m][0].Load()}
	}
	return out
}

// ModeCount is the number of fallback bucket decisions of one mode.
type ModeCount struct {
	Allowed, Denied uint64
}

// Mode returns the counts of mode m (quota.FailLocal, FailOpen or
// FailClosed); an unknown mode has none.
func (st Stats) Mode(m quota.FailMode) ModeCount {
	if int(m) < len(st.Fallback) {
		return st.Fallback[m]
	}
	return ModeCount{}
}

// Stats returns a snapshot of the Store's counters.
func (s *Store) Stats() Stats {
	st := Stats{
		State:                s.cb.State(),
		Calls:                s.c.calls.Load(),
		Failures:             s.c.failures.Load(),
		Timeouts:             s.c.timeouts.Load(),
		Canceled:             s.c.canceled.Load(),
		Slow:                 s.c.slow.Load(),
		Budget:               s.budget.get(),
		Rejected:             s.c.rejected.Load(),
		FallbackTakesAllowed: s.c.takesAllowed.Load(),
		FallbackTakesDenied:  s.c.takesDenied.Load(),
		Opened:               s.c.transitions[gobreaker.StateOpen].Load(),
		HalfOpened:           s.c.transitions[gobreaker.StateHalfOpen].Load(),
		Closed:               s.c.transitions[gobreaker.StateClosed].Load(),
		Settled:              s.c.settled.Load(),
		SettleFailed:         s.c.settleFailed.Load(),
		SettleDropped:        s.c.settleDropped.Load(),
		LocalSettled:         s.c.localSettled.Load(),
	}
	st.Fallback = s.c.modes.snapshot()
	for i := range s.c.causes {
		if v := s.c.causes[i].Load(); v > 0 {
			if st.Causes == nil {
				st.Causes = make(map[string]uint64, cause.N)
			}
			st.Causes[cause.Names[i]] = v
		}
	}
	s.c.byRule.Range(func(k, v any) bool {
		if st.ByRule == nil {
			st.ByRule = make(map[string][3]ModeCount)
		}
		st.ByRule[k.(string)] = v.(*modeCounts).snapshot()
		return true
	})
	s.mu.Lock()
	st.LocalBuckets = s.local.len()
	st.Evictions = s.local.evicted
	for _, o := range s.ch.owed {
		st.Owed += o.abs()
	}
	s.mu.Unlock()
	st.Charged, st.Debt, st.ReportFailures = s.ch.charged.Load(), s.ch.debt.Load(), s.ch.failures.Load()
	st.ChargeDropped, st.ChargeExpired = s.ch.dropped.Load(), s.ch.expired.Load()
	st.Late, st.LateApplied, st.LateAnswered = s.c.late.Load(), s.c.lateApplied.Load(), s.c.lateAnswered.Load()
	st.GivenBack = s.ch.givenBack.Load()
	return st
}
