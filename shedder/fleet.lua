-- Fleet shedder sync: publish one instance's in-flight counts (and, with an
-- adaptive capacity, its capacity), drop expired instances, and return the
-- sums over the other live instances.
--
-- KEYS[1]  hash: instance ID -> "expiry_ms test read write critical"
-- KEYS[2]  hash: instance ID -> "expiry_ms capacity", adaptive instances
--          only (a separate key, so that a Fleet of an older version
--          sharing KEYS[1] never sees a value it cannot parse)
-- ARGV[1]  now in Unix milliseconds, or "" to read Redis TIME
-- ARGV[2]  TTL in milliseconds
-- ARGV[3]  this instance's ID
-- ARGV[4..7] this instance's counts: test, read, write, critical
-- ARGV[8]  this instance's adaptive capacity, or "" for a fixed capacity
-- returns  {test, read, write, critical} summed over the other live
--          instances, then the sum of the capacities they published and
--          the number of them that published none
--
-- The preamble of internal/redisnow (prepended by redisnow.Script) reads
-- ARGV[1] and defines the local now used below, in Unix milliseconds.
local ttl = tonumber(ARGV[2])
local me = ARGV[3]
redis.call('HSET', KEYS[1], me, string.format('%d %d %d %d %d',
  now + ttl, tonumber(ARGV[4]), tonumber(ARGV[5]), tonumber(ARGV[6]), tonumber(ARGV[7])))
if ARGV[8] ~= '' then
  redis.call('HSET', KEYS[2], me, string.format('%d %d', now + ttl, tonumber(ARGV[8])))
  redis.call('PEXPIRE', KEYS[2], ttl)
end
local all = redis.call('HGETALL', KEYS[1])
local sums = {0, 0, 0, 0, 0, 0}
local live = {}
local others = 0
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
    live[id] = true
    others = others + 1
  end
end
redis.call('PEXPIRE', KEYS[1], ttl)
local caps = redis.call('HGETALL', KEYS[2])
local published = 0
for i = 1, #caps, 2 do
  local id, v = caps[i], caps[i + 1]
  local exp, c = string.match(v, '^(%d+) (%d+)$')
  if (not exp) or tonumber(exp) <= now then
    redis.call('HDEL', KEYS[2], id)
  elseif live[id] then
    sums[5] = sums[5] + tonumber(c)
    published = published + 1
  end
end
sums[6] = others - published
return sums
