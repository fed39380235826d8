// Package fleetshed is floodgate's fleet-usage load shedder: it decides
// whether a request of a given priority is shed now, given how many
// requests are in flight across every instance of the service, so that
// the whole fleet keeps a share of its capacity (20% by default) for
// critical traffic and drops the rest first when it runs short, Stripe
// style. Package shedder is its local counterpart, which decides on this
// instance's requests alone; a service chains both (fleetshed first).
//
// The name says what sets it apart: the fleet-usage shedder (fleet + shed)
// needs a Redis shared by the fleet, so it lives apart from package
// shedder, and a binary that sheds on local counts only never links
// go-redis.
//
// # Counts and liveness
//
// Each instance counts its own requests in flight per priority, in
// memory. Sync (run every heartbeat interval by Run) sends them to Redis
// in one script call, which is also a heartbeat of the instance's
// fleet.Members: it records the instance in the Members' member set, live
// until now + TTL (the one heartbeat of package fleet, with its rule that
// a rejoining beat never lowers Members.Count), stores the counts in a
// hash beside the member set, deletes the counts of instances no longer
// live in the set, and returns the sum over the other live instances. So
// which instances count is decided once, by package fleet: an instance
// that dies stops beating, and its share is freed a TTL after its last
// beat; Leave (called by Run when it stops) frees it at once. An instance
// whose Members still beat (its Members.Run) keeps its last published
// counts in force while it lives: Run stops only with its context, and
// then leaves.
//
// The instance ID, the Redis client, the keys (the member set and, in its
// Redis Cluster slot, its ":shed" and ":shed:capacity" hashes), the
// heartbeat interval, the TTL, the per-call timeout and the Clock all come
// from the fleet.Members given to New; fleet.WithClock makes the script
// take the time from that Clock instead of Redis TIME, so tests expire
// instances on fake time.
//
// # Staleness
//
// Admit never calls Redis: it decides on the other instances' counts as
// of the last successful Sync plus this instance's live count. The other
// instances' part is therefore up to an interval plus one round trip old
// (and each of them published its count up to an interval before that),
// so in a fleet ramping up fast the fleet may overshoot the threshold by
// what the other instances admitted within about two intervals. When no
// Sync has succeeded for a TTL (whether the Syncs failed or one still
// waits on a slow Redis), the Shedder fails open: it forgets the other
// instances' counts and Admit returns ErrStale with each decision.
//
// # Adaptive capacity
//
// With an adaptive capacity (Config.Adaptive, set by Reconfigure) each
// instance learns its own share as a shedder.Shedder learns its capacity
// (Config.Capacity is where this instance's share starts) and publishes
// it at every Sync. The fleet
// capacity is this instance's share plus the shares the other live
// instances published; a live instance that published none (a fixed one)
// counts as this instance's share. While the counts are stale, an
// adaptive instance counts its own share alone: it protects itself.
//
// # Imports
//
// fleetshed imports the floodgate core, package shedder (for the settings
// types both shedders share), package fleet (liveness), go-redis through
// those, and floodgate's internal plumbing; never a transport.
package fleetshed
