-- Fleet shedder sync: publish one instance's in-flight counts, drop expired
-- instances, and return the sum of the other live instances' counts.
--
-- KEYS[1]  hash: instance ID -> "expiry_ms test read write critical"
-- ARGV[1]  now in Unix milliseconds, or "" to read Redis TIME
-- ARGV[2]  TTL in milliseconds
-- ARGV[3]  this instance's ID
-- ARGV[4..7] this instance's counts: test, read, write, critical
-- returns  {test, read, write, critical} summed over the other live instances
--
-- The preamble of internal/redisnow (prepended by redisnow.Script) reads
-- ARGV[1] and defines the local now used below, in Unix milliseconds.
local ttl = tonumber(ARGV[2])
local me = ARGV[3]
redis.call('HSET', KEYS[1], me, string.format('%d %d %d %d %d',
  now + ttl, tonumber(ARGV[4]), tonumber(ARGV[5]), tonumber(ARGV[6]), tonumber(ARGV[7])))
local all = redis.call('HGETALL', KEYS[1])
local sums = {0, 0, 0, 0}
for i = 1, #all, 2 do
  local id, v = all[i], all[i + 1]
  local exp, a, b, c, d = string.match(v, '^(%d+) (%d+) (%d+) (%d+) (%d+)$')
  if (not exp) or tonumber(exp) <= now then
    redis.call('HDEL', KEYS[1], id)
  elseif id ~= me then
    sums[1] = sums[1] + tonumber(a)
    sums[2] = sums[2] + tonumber(b)
    sums[3] = sums[3] + tonumber(c)
    sums[4] = sums[4] + tonumber(d)
  end
end
redis.call('PEXPIRE', KEYS[1], ttl)
return sums
