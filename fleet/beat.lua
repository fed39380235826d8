-- Fleet heartbeat: record one instance as live until now + TTL, drop the
-- instances whose expiry has passed, and count the live ones.
--
-- KEYS[1]  sorted set: instance ID -> expiry in Unix milliseconds
-- ARGV[1]  now in Unix milliseconds, or "" to read Redis TIME
-- ARGV[2]  TTL in milliseconds (>= 1)
-- ARGV[3]  this instance's ID
-- returns  {live instances, this one included; 1 if this instance was not
--          in the set (first beat, after Leave, after its own expiry, or
--          after Redis lost the set), else 0}
--
-- The preamble of internal/redisnow reads ARGV[1] and defines the local
-- now; internal/liveness defines beat, the one heartbeat every fleet-wide
-- script shares.
local n, added = beat(KEYS[1], tonumber(ARGV[2]), ARGV[3])
return {n, added}
