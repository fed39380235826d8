-- credit.lua: give units back to token bucket and GCRA buckets
-- (Store.Refund), as if that many units charged earlier had never been
-- taken, capped so a bucket never holds more than its capacity. Every key
-- must be in one cluster slot.
--
-- KEYS[i]   state key of bucket i, i = 1..n
-- ARGV[1]   now, integer microseconds since the Unix epoch, or "" to read
--           Redis TIME (as take.lua)
-- ARGV[2]   the buckets' limits and costs, packed as take.lua's per-take
--           argument: n ("<d"), then per bucket ("<Bdddd") the algorithm
--           (0 token bucket, 1 GCRA; the caller refuses the others), rate
--           N, period P in microseconds, burst B and cost c
--
-- Reply: integer, the number of buckets whose state changed.
--
-- With the arithmetic of the tiers.Algorithm doc (the same operations, in
-- the same order, as take.lua and memstore):
--   token bucket  tokens = min(B, tokens + (elapsed * N) / P), ts = now
--                 tokens = min(B, tokens + c)
--   GCRA          tat = max(t, tat - c * T), t = now - tiers.GCRAEpoch,
--                 T = P / N (tat in µs since the epoch, as take.lua stores it)
-- An absent key (or a state of another layout, which take.lua reads as
-- absent) is a full bucket and is left alone, as is a cost of 0.
--
-- TTLs are kept (SET KEEPTTL) and so is the state's recorded deadline:
-- the refunded state is full no later than the charged one would have
-- been, so the key's TTL still covers it, and it lives no longer than the
-- charge had made it.

local pack, sunpack = struct.pack, struct.unpack
local now
if ARGV[1] == '' then
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000000 + tonumber(t[2])
else
  now = tonumber(ARGV[1])
end
local EPOCH = 1767225600000000

local x = ARGV[2]
local n, pos = sunpack('<d', x)
if n ~= #KEYS or #x ~= 8 + 33 * n then
  error('credit.lua: the limits argument has ' .. #x .. ' bytes for ' .. n .. ' buckets and ' .. #KEYS .. ' keys')
end
-- unpack has a stack limit: more than 1000 keys are read one by one
local vals
if n <= 1000 then vals = redis.call('MGET', unpack(KEYS)) else vals = {} end

local done = 0
for i = 1, n do
  local alg, N, P, B, c
  alg, N, P, B, c, pos = sunpack('<Bdddd', x, pos)
  local k = KEYS[i]
  local v
  if n <= 1000 then v = vals[i] elseif c > 0 then v = redis.call('GET', k) end
  local nv
  if c > 0 and v then
    if alg == 0 and #v == 24 then
      local e0, tokens, ts = sunpack('<ddd', v)
      local elapsed = now - ts
      if elapsed < 0 then elapsed = 0 end
      local t = tokens + (elapsed * N) / P
      if t < B then tokens = t else tokens = B end
      t = tokens + c
      if t < B then tokens = t else tokens = B end
      nv = pack('<ddd', e0, tokens, now)
    elseif alg == 1 and #v == 16 then
      local e0, tat = sunpack('<dd', v)
      local t = now - EPOCH
      tat = tat - c * (P / N)
      if tat < t then tat = t end
      nv = pack('<dd', e0, tat)
    end
  end
  if nv then
    redis.call('SET', k, nv, 'KEEPTTL')
    done = done + 1
  end
end
return done
