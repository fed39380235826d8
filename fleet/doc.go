// Package fleet decides how many instances of a service are live, from
// heartbeats the instances keep in the Redis they share, so that a rate
// limit meant for the whole fleet can be split among them by the real
// count: Members.Count is that count, the last one known when Redis cannot
// answer, or a static count that overrides it (WithStatic). The local-first
// store and the fallback store's local limiters take it as a func() int.
//
// # Heartbeats
//
// Every instance beats every interval (Run; default 1s). A
// beat is one Lua script call, atomic: it records this instance in a sorted
// set (instance ID -> expiry in Unix milliseconds, now + TTL), removes the
// members whose expiry has passed, reads how many remain, and sets the
// key's own expiry to the TTL, so the set of a fleet that is gone vanishes
// from Redis. An instance is live while now is before its expiry: one that
// stops beating drops out of the others' counts at their first beat a TTL
// (default 5s) after its last one; Leave (called by Run when it
// stops) removes it at once, and the others count one fewer at their next
// beat. Now is Redis TIME, read in the script, so instances with skewed
// clocks agree on expiries; WithClock passes the time instead (tests on
// fake time).
//
// # What Count returns
//
// Count is an atomic load, always at least 1 (this instance counts itself).
// Before the first successful beat it is 1. A failed beat leaves it as it
// was, so through a Redis outage the fleet keeps sharing by the last count
// known; Stale reports when that count is older than a TTL, and Errors
// counts the failures. A beat that finds this instance missing from the set
// (Redis restarted empty, failed over without the set, or this instance
// expired) does not lower the count, because the other instances
// re-register only within the next interval: without that, a Redis restart
// would make each instance believe for an interval that it is alone and
// admit the whole fleet's limit. Count may be up to an interval plus a
// round trip old, and lags a stopped instance by up to a TTL plus an
// interval; in both directions the error is short-lived.
//
// # One liveness
//
// The member set is floodgate's one record of which instances are live.
// A fleet-wide stage that keeps per-instance state in Redis (the
// fleet-usage shedder of package shedder/fleetshed) takes a *Members and
// beats on its set in the same script that publishes its state, with the
// same heartbeat code; such a beat updates Count and Stale as Beat does,
// so a service may run either loop, or both. The stage counts another
// instance's state only while that instance is live in the set.
//
// # Keys
//
// All instances of one service use one key (WithKey; default "fg:fleet:{members}"),
// one Redis key, so on Redis Cluster it lives in one slot. Two services that
// share one Redis must use different keys. A stage that keeps state beside
// the set derives its keys from this one, in its slot.
//
// # Imports
//
// This package imports the floodgate core, go-redis and floodgate's
// internal Redis plumbing (internal/redisnow, internal/liveness); never a
// stage.
package fleet
