-- Fleet-usage shedder sync: beat for this instance on the fleet's member
-- set, publish its in-flight counts (and, with an adaptive capacity, its
-- capacity), drop the entries of instances that are no longer live, and
-- return the sums over the other live instances.
--
-- KEYS[1]  the member set of package fleet: instance ID -> expiry (ms)
-- KEYS[2]  hash: instance ID -> "test read write critical"
-- KEYS[3]  hash: instance ID -> capacity, adaptive instances only
-- ARGV[1]  now in Unix milliseconds, or "" to read Redis TIME
-- ARGV[2]  TTL in milliseconds
-- ARGV[3]  this instance's ID
-- ARGV[4..7] this instance's counts: test, read, write, critical
-- ARGV[8]  this instance's adaptive capacity, or "" for a fixed capacity
-- returns  {test, read, write, critical} summed over the other live
--          instances that publish counts, the sum of the capacities they
--          published, the number of them that published none, then the
--          beat's answer: live members, and 1 if this instance rejoined
--
-- The preamble of internal/redisnow defines the local now; the function
-- beat of internal/liveness, the one heartbeat of package fleet, decides
-- who is live. An instance's counts count while it is live in the member
-- set (a TTL after its last beat, from this script or its Members).
local ttl = tonumber(ARGV[2])
local me = ARGV[3]
local live, rejoined = beat(KEYS[1], ttl, me)
redis.call('HSET', KEYS[2], me, string.format('%d %d %d %d',
  tonumber(ARGV[4]), tonumber(ARGV[5]), tonumber(ARGV[6]), tonumber(ARGV[7])))
redis.call('PEXPIRE', KEYS[2], ttl)
if ARGV[8] ~= '' then
  redis.call('HSET', KEYS[3], me, string.format('%d', tonumber(ARGV[8])))
  redis.call('PEXPIRE', KEYS[3], ttl)
else
  redis.call('HDEL', KEYS[3], me)
end
local all = redis.call('HGETALL', KEYS[2])
local sums = {0, 0, 0, 0, 0, 0, live, rejoined}
local counted = {}
local others = 0
for i = 1, #all, 2 do
  local id, v = all[i], all[i + 1]
  local a, b, c, d = string.match(v, '^(%d+) (%d+) (%d+) (%d+)$')
  if (not a) or (not redis.call('ZSCORE', KEYS[1], id)) then
    redis.call('HDEL', KEYS[2], id)
  elseif id ~= me then
    sums[1] = sums[1] + tonumber(a)
    sums[2] = sums[2] + tonumber(b)
    sums[3] = sums[3] + tonumber(c)
    sums[4] = sums[4] + tonumber(d)
    counted[id] = true
    others = others + 1
  end
end
local caps = redis.call('HGETALL', KEYS[3])
local published = 0
for i = 1, #caps, 2 do
  local id, v = caps[i], caps[i + 1]
  local c = string.match(v, '^(%d+)$')
  if (not c) or (not redis.call('ZSCORE', KEYS[1], id)) then
    redis.call('HDEL', KEYS[3], id)
  elseif counted[id] then
    sums[5] = sums[5] + tonumber(c)
    published = published + 1
  end
end
sums[6] = others - published
return sums
