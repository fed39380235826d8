-- The one heartbeat of floodgate's fleet liveness, a Lua function that
-- scripts built with redisnow.Script append their body to: the preamble
-- of internal/redisnow defines the local now (Unix milliseconds) it reads.
--
-- beat(key, ttl, id) records instance id in the sorted set key (instance
-- ID -> expiry in Unix milliseconds) as live until now + ttl, removes the
-- instances whose expiry has passed, sets the key's own expiry to ttl, and
-- returns the number of live instances (id included) and 1 if id was not
-- in the set (a first beat, after a leave, after its own expiry, or after
-- Redis lost the set), else 0. An instance is live while now < its
-- expiry; expired members go first, so an instance whose own entry had
-- expired counts as rejoining.
local function beat(key, ttl, id)
  redis.call('ZREMRANGEBYSCORE', key, '-inf', now)
  local added = redis.call('ZADD', key, now + ttl, id)
  local n = redis.call('ZCARD', key)
  redis.call('PEXPIRE', key, ttl)
  return n, added
end
