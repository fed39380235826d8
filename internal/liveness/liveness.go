// Package liveness is the one implementation of fleet liveness that
// package fleet and the fleet-wide stages share: which instances of a
// service are live is decided by a single heartbeat (the Lua function
// beat, in BeatLua) on a single Redis sorted set per service, the member
// set of a fleet.Members. A stage that keeps per-instance state in Redis
// (the fleet-usage shedder's in-flight counts) beats on its Members' set
// in the same script that publishes its state, and counts another
// instance's state only while that instance is live in the set; it then
// hands the beat's answer back to the Members (Member.Observe), so Count,
// Stale and the rule that a rejoining beat never lowers the count are
// those of package fleet whichever of the two beat.
//
// It imports go-redis (the Member carries the Members' client) and the
// floodgate core; package fleet fills in Lookup, and only packages that
// are themselves Redis-backed import this one.
package liveness

import (
	_ "embed"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/floodgate-go/floodgate"
)

// BeatLua defines the Lua function beat(key, ttl, id) -> live, rejoined.
// A script built with redisnow.Script(BeatLua + body) may call it.
//
//go:embed beat.lua
var BeatLua string

// Member is what a stage that beats on behalf of a fleet.Members needs of
// it.
type Member struct {
	Client      redis.UniversalClient // the Members' client
	Key         string                // the member set
	ID          string                // this instance in the set
	Interval    time.Duration         // how often the Members' Run beats
	TTL         time.Duration         // how long a beat keeps an instance live
	Timeout     time.Duration         // bounds each Redis call
	Clock       floodgate.Clock       // never nil
	ScriptClock floodgate.Clock       // nil: scripts read Redis TIME
	// Observe records the answer of a beat that started at start (Unix
	// nanoseconds on Clock) as the Members' own beats are recorded.
	Observe func(live int64, rejoined bool, start int64)
}

// Lookup returns the Member behind m, a *fleet.Members, and false when m
// is not one or counts statically (fleet.WithStatic: it has no member
// set). Package fleet sets it when it is initialised.
var Lookup func(m any) (Member, bool)
