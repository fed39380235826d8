// Package shedder is floodgate's priority load shedder: it decides whether a
// request of a given priority is shed now, given how many requests are in
// flight on this instance, so that when capacity runs short the least
// important traffic is dropped first, Stripe style. Its fleet-usage
// counterpart, which decides on the requests in flight across the fleet
// through Redis, is package shedder/fleetshed.
//
// Priority is resolved by the transport (package interceptor documents the
// order); this package only reads Request.Priority. PriorityUnspecified takes
// the shedder's default priority, PriorityWrite unless WithDefaultPriority
// says otherwise: an unannotated call may change state.
//
// # Worker-utilisation shedder (Shedder)
//
// A Shedder counts the requests it admitted and that have not yet called
// their Done (in flight) against a capacity. Each priority below critical has
// a threshold, a fraction of capacity: by default test 0.70, read 0.80,
// write 0.90. Critical is never shed. With capacity 100 a test request is
// shed when 70 or more requests are in flight, a read from 80, a write from
// 90. A shed Decision has Allowed false, Policy "shedder", Limit = capacity,
// Remaining = capacity minus in flight (at least 0) and RetryAfter (1s unless
// WithRetryAfter says otherwise); transports turn it into UNAVAILABLE / 503
// with Retry-After.
//
// With WithRetries, a retry (a request carrying grpc-previous-rpc-attempts
// above 0, or the Retries' attempt header above 1: the transport copies
// them into Request.Headers, as RequestHeaders asks) is shed a margin
// (5% of capacity) below its priority's threshold, before the first
// attempts of its priority: with capacity 100 a retried read is shed from
// 75, a first-attempt read from 80. Its Decision's Policy is
// "shedder.retries". Retries of a refused call are the load that turns an
// overload into a retry storm (gRFC A6); a first attempt has not failed
// yet.
//
// An adaptive Shedder also refuses at once a request (critical excepted)
// whose context's deadline is nearer than the least latency it has seen
// (Stats.MinLatency): it cannot finish in time, and would only take a
// slot from one that can. Its Decision's Policy is "shedder.deadline",
// with no retry delay.
//
// With Config.Fairness (a policy's shedder: fairness:), the room of each
// priority is shared among the callers it names, by the plan tiers'
// weights (floodgate.Fairness): while a priority is shed, a caller under
// its share is still let in, up to the next priority's threshold (the
// capacity, for writes), and one over it is shed with the Policy
// "shedder.fairness"; a caller whose demand exceeds its share is held to
// it even while the priority has room. With capacity 100 and five tenants
// reading, each may hold 16 of the reads' 80 (24 while its demand is
// within its share): one tenant's surge is shed, the others' reads are
// served. It costs a sharded lock per admitted request and per Done.
//
// Shedding starts and stops with hysteresis so that a load hovering around a
// threshold does not flap: a priority starts being shed when in flight
// reaches its threshold, and stops only when in flight has fallen below
// threshold − band (band = 5% of capacity, rounded up: with capacity 100,
// test is shed from 70 and admitted again below 65; never below 1, so a
// class always recovers once nothing is in flight). WithHysteresis can add
// a hold: shedding then also lasts at least that long after in flight was
// last seen at or above the threshold. The hold is off by default because,
// under closed-loop overload, it costs goodput: every time it expires the
// waiting clients rush in, cross the threshold and start another full hold,
// while the band alone keeps the workers busy with the admitted classes
// (BenchmarkOverload compares the two).
//
// The hold is read from the Clock (WithClock), so tests drive it on fake
// time. The Clock is read only while a priority is being shed with a hold
// configured: an admitted request costs one atomic compare-and-swap and no
// allocation. Done is prebuilt once; the transport must call it exactly once
// per admitted request (floodgate's interceptors do, by defer): a second call
// would release a slot that another request holds.
//
// # Adaptive capacity
//
// A fixed capacity is a guess: too high and a sick service drowns before
// anything is shed, too low and a healthy one sheds work it could do.
// WithAdaptiveCapacity (fleetshed.Config.Adaptive for the fleet-usage
// shedder, or the policy file's shedder: adaptive: section) makes the
// capacity follow the service; the thresholds and the priority order stay
// as they are, only the capacity they are shares of moves, within [Min,
// Max].
//
// Every admitted request is timed (Admit to Done, on the Clock) and its
// Outcome read: a success or a failure is a latency sample and served
// work, a drop (deadline passed, the handler answered overloaded) a
// latency sample only, an ignored request (a later stage of a Chain
// denied it, the client went away) nothing at all: a chain's denial is
// never a fast sample. Time a later stage spent waiting on a failing
// store after the shedder admitted the request (a rate-limit call to a
// stalled Redis, package fallback, which counts it in the request's
// context) is taken out of its sample: a stalled store is not an
// overloaded service. Samples are collected in windows (a window closes
// at the first Done at least Window, 100ms, after it opened that brings
// it to MinSamples, 10). At the end of a window:
//
//	throughput = served / window length;  max over the last History windows (50)
//	latency    = mean latency of the window's samples
//	least      = the least window latency seen within Probe (10s)
//	little     = max throughput x least     (Little's law: what the service
//	                                         holds in flight with no queue)
//	overloaded = latency > Tolerance x least (1.5)
//	             or CPU >= CPUTarget         (when set; the CPU meter's share
//	                                         of the container's quota)
//	             or memory >= MemoryTarget   (when set; the memory meter's share
//	                                         of GOMEMLIMIT or the cgroup's
//	                                         memory limit, as the window closes)
//	overloaded:            capacity = min(capacity x Backoff (0.9), little x Headroom (1.25))
//	healthy, and it shed:  capacity = capacity x (1 + Growth (0.1)), or
//	                       capacity x 2 until the first overloaded window (slow start)
//	otherwise:             unchanged
//
// clamped to [Min, Max]; the whole part is the capacity. So a service
// whose latency holds grows its capacity while there is demand it sheds,
// one that queues falls at once to what Little's law says it can hold,
// and one with a CPU target keeps the container's CPU under it (package
// shedder/cpu reads the cgroup v2 cpu.max or v1 cfs quota, not the host's
// cores; the CPU signal is off unless CPUTarget is set, go-zero's and
// sentinel's BBR rule in the same shape), and one with a memory target
// keeps the memory it holds under it: a handler that holds a buffer for
// each call can run a service out of memory (GOMEMLIMIT, the cgroup's
// memory.max) before its CPU or latency shows anything (package
// shedder/mem reads the Go runtime's live heap and the cgroup's working
// set; off unless MemoryTarget is set). The mean is the statistic of
// Little's law (L = λW holds for means), and a window's mean over many
// requests is steady enough that no percentile is needed here.
//
// The least latency can only be seen when nothing queues. A service
// overloaded since its first window would take its queued latency for the
// least, so when no window has been as fast for Probe, a probe halves the
// capacity (to half of what was in flight, if less) for two windows: one
// for the requests admitted before to drain, one to measure those admitted
// after, whose mean becomes the least latency; then the capacity is
// restored. Start the capacity low (Min): it doubles every window under
// load until the service first shows overload, where one started far too
// high under sustained overload needs several probes to come down.
//
// Adaptive capacity costs a clock read at Admit and at Done and a mutex
// at Done; Done is a pooled ticket, so Admit+Done still allocates nothing
// (BenchmarkShedderAdmitDone). Stats reports the capacity and what it was
// learnt from; Reconfigure changes every setting at run time (a policy
// reload) keeping what was learnt.
//
// # Options and imports
//
// New takes Options, all named With…, and returns an error naming every
// bad one. The settings types AdaptiveCapacity and Stats are
// shared with package shedder/fleetshed, which builds on the same
// machinery (package shedder/internal/core).
//
// This package imports the floodgate core, the standard library and its
// own internal package only: it never links go-redis, so a binary that
// sheds on local counts alone carries no Redis client.
package shedder
