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
-- The preamble of internal/redisnow (prepended by redisnow.Script) reads
-- ARGV[1] and defines the local now used below. An instance is live while
-- now < its expiry. Expired members go first, so an instance whose own
-- entry had expired counts as rejoining.
local ttl = tonumber(ARGV[2])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
local added = redis.call('ZADD', KEYS[1], now + ttl, ARGV[3])
local n = redis.call('ZCARD', KEYS[1])
redis.call('PEXPIRE', KEYS[1], ttl)
return {n, added}
