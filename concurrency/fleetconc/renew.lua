-- Fleet per-key concurrency cap: extend a held slot's lease, if it still
-- exists (an expired slot may already belong to another request).
--
-- KEYS[1]  sorted set: request ID -> lease expiry (Unix ms)
-- ARGV[1]  now in Unix milliseconds, or "" to read Redis TIME
-- ARGV[2]  lease in milliseconds
-- ARGV[3]  the request's ID
-- returns  1 if renewed, 0 if the slot was gone
--
-- The preamble of internal/redisnow (prepended by redisnow.Script) reads
-- ARGV[1] and defines the local now used below, in Unix milliseconds.
local lease = tonumber(ARGV[2])
local score = redis.call('ZSCORE', KEYS[1], ARGV[3])
if (not score) or tonumber(score) <= now then
  return 0
end
redis.call('ZADD', KEYS[1], 'XX', now + lease, ARGV[3])
redis.call('PEXPIRE', KEYS[1], lease)
return 1
