-- Fleet per-key concurrency cap: take one slot if the key has room.
--
-- KEYS[1]  sorted set: request ID -> lease expiry (Unix ms)
-- ARGV[1]  now in Unix milliseconds, or "" to read Redis TIME
-- ARGV[2]  lease in milliseconds
-- ARGV[3]  cap
-- ARGV[4]  this request's ID
-- returns  {1, count after taking} or {0, count}
--
-- The preamble of internal/redisnow (prepended by redisnow.Script) reads
-- ARGV[1] and defines the local now used below, in Unix milliseconds.
local lease = tonumber(ARGV[2])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
local n = redis.call('ZCARD', KEYS[1])
if n >= tonumber(ARGV[3]) then
  return {0, n}
end
redis.call('ZADD', KEYS[1], now + lease, ARGV[4])
redis.call('PEXPIRE', KEYS[1], lease)
return {1, n + 1}
