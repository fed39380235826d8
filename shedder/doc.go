// Package shedder is floodgate's priority load shedder: it decides whether a
// request of a given priority is shed now, given how many requests are in
// flight on this instance (Shedder) or across the fleet (Fleet), so that when
// capacity runs short the least important traffic is dropped first, Stripe
// style.
//
// Priority is resolved by the transport (package interceptor documents the
// order); this package only reads Request.Priority. PriorityUnspecified takes
// the shedder's default priority, PriorityWrite unless WithDefaultPriority
// (WithFleetDefaultPriority) says otherwise: an unannotated call may change
// state.
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
// # Fleet-usage shedder (Fleet)
//
// See Fleet: it reserves a share of the fleet's in-flight capacity (20% by
// default) for critical traffic, with per-instance counts published to Redis.
//
// # Options
//
// New takes Options and NewFleet takes FleetOptions. A setting both make sense
// for exists under both: WithClock and WithFleetClock, WithHysteresis and
// WithFleetHysteresis, and so on; every FleetOption is named WithFleet….
// Either constructor returns an error naming every bad option.
package shedder
