// Package history records the takes a fleet of processes makes against one
// Redis store and checks that the recorded history is linearizable under
// the sequential model of the buckets (the arithmetic of quota.Algorithm):
// that some order of the takes, consistent with when each was sent and
// answered, explains every allowed and denied result and every reported
// remaining count, with every multi-level take charged all or nothing.
//
// # What is recorded
//
// A Recorder wraps the store a process decides exact rules with. Per take
// it keeps the process, the wall-clock times the take was sent and
// answered, the buckets (key, limit, cost), and the answer: allowed or
// denied, and per bucket whether it allowed and its remaining count. With
// NowHook on the store's Redis client and the store's batching off, it also
// keeps the Redis time the take's script used (the first integer of
// take.lua's reply), read from the reply without touching the store. A
// take that returned an error has an unknown outcome: it may or may not
// have been applied, at any time after it was sent. Over a store that
// takes report calls the Recorder is a quota.Reporter too, so package
// fallback charges its local admits through it as it would without it;
// each charged bucket of a report call on a key with a recorded take is
// recorded as a report Op (the units charged, negative when given back,
// at an unknown time in the call's interval, and the remaining count),
// a call whose reply was lost as Resolve later found it, or else as a
// report of unknown outcome.
//
// # The model and what a verdict proves
//
// Check searches for a linearization as porcupine does (Wing and Gong's
// search with Lowe's memoization of visited (linearized set, state)
// pairs), and as porcupine partitions by key, it searches each part of
// the history that shares no bucket with the rest on its own: takes are
// in one part when a chain of takes, each sharing a bucket with the next,
// joins them (a restart is in every part, a failover in the parts of its
// buckets). A take whose Redis time is known is placed at that time (Redis
// runs scripts one at a time and its TIME does not go back, and Check
// verifies that the time lies in the take's [sent, answered] interval, all
// processes reading the same host clock); a take without one may run at
// any point of its interval. Times along a linearization never decrease.
//
// The state of a bucket is kept as a set of possible states, not one:
// a token bucket as an interval of its zero time z (tokens at time t are
// min(B, (t - z)·N/P), which is the Algorithm doc's refill), a fixed
// window as an interval of its count in its window. Each take narrows the
// interval with what it observed (allowed or denied per bucket, and
// remaining, so the model resynchronizes on every answer) and an allowed
// take charges every bucket. A take of unknown outcome is never placed:
// instead every later step may assume it was applied (its cost is added to
// the upper end of its buckets' intervals for ever after it was sent),
// which over-approximates every place and outcome it could have had. A
// Redis restart (Reset, the data lost) empties every bucket at some point
// of its interval, and takes of unknown outcome sent before it stop
// counting. A Cluster failover (a Reset with Keys: the dead master's
// buckets) lets each of those buckets lose any number of the charges it
// had, at some point of its interval, and changes nothing else: the
// promoted replica lacks what the master had not replicated, an amount
// the history cannot know, so the check of the first answer after it on
// each such bucket is that weak, and every answer after that as strong as
// anywhere (the model resynchronizes on each answer).
//
// So the check is sound for failures: a NotLinearizable verdict means no
// order and no outcome of the unknown takes explains the answers, within
// a tolerance of 1e-6 token for IEEE rounding. It is not complete: the
// over-approximations (an unknown take counted at every later step; a
// take without Redis time constrained per bucket, not jointly) can accept
// a history a precise checker would refuse. Only token bucket and fixed
// window are modelled; Check refuses other algorithms and buckets that
// may wait.
package history
