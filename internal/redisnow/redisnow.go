// Package redisnow decides where floodgate's Redis scripts read the current
// time: from the caller's Clock, passed as ARGV[1], so that tests run on
// fake time, or, when ARGV[1] is "", from Redis TIME, so that instances with
// skewed clocks agree on expiries.
//
// Every script that needs the time is built with Script, which runs the one
// preamble (now.lua) before the script's body; the preamble defines the Lua
// local now, in Unix milliseconds. The body reads ARGV[1] no further.
package redisnow

import (
	_ "embed"
	"strconv"

	"github.com/redis/go-redis/v9"

	"github.com/floodgate-go/floodgate"
)

//go:embed now.lua
var preamble string

// Script returns the script that runs the preamble defining now, then body.
func Script(body string) *redis.Script { return redis.NewScript(preamble + body) }

// Arg returns the ARGV[1] of a script built with Script: clock's current
// time in Unix milliseconds, or "" when clock is nil, which makes the script
// read Redis TIME.
func Arg(clock floodgate.Clock) string {
	if clock == nil {
		return ""
	}
	return strconv.FormatInt(clock.Now().UnixMilli(), 10)
}
