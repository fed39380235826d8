-- refund.lua: undo a charge made by take.lua, for multi-slot cluster takes
-- where another slot denied. Every key must be in one cluster slot.
--
-- KEYS[i]   state key of bucket i, i = 1..n
-- ARGV[1]   the now (integer microseconds) the charging take.lua used
-- ARGV[7(i-1)+2 .. 7i+1]  bucket i: algorithm, rate N, period P in
--           microseconds, burst B, cost c (as passed to take.lua), then the
--           key's state before the take and the state the take wrote (as
--           take.lua reported them in mode "p"; "" = absent)
--
-- Reply: integer, the number of buckets whose state was restored.
--
-- When the key still holds exactly what the take wrote (no other take
-- touched it since), the old state is put back byte for byte (or the key
-- deleted if it was absent), so the bucket is as if never charged. When
-- another take came in between, the units are given back arithmetically:
-- token bucket tokens + c (capped at B), GCRA tat - c*T (both exact up to
-- one rounding of a double; the GCRA tat is in µs since tiers.GCRAEpoch,
-- as take.lua stores it, and subtracting c*T needs no epoch), the window counters minus c when the charged
-- window is still current (or now previous); the log always loses c of its
-- entries at the charge's timestamp, which is exact. TTLs are kept: the
-- charged state's TTL is never shorter than the old state's.

local fmt = string.format
local floor = math.floor
local function num(x) return fmt('%.17g', x) end

local t0 = tonumber(ARGV[1])
local function split(v)
  local out, i = {}, 1
  for p in string.gmatch(v, '%S+') do out[i] = tonumber(p); i = i + 1 end
  return out
end
local function window(W)
  local w = floor(t0 / W)
  if w * W > t0 then w = w - 1 elseif (w + 1) * W <= t0 then w = w + 1 end
  return w
end

local done = 0
for i = 1, #KEYS do
  local a = 1 + (i - 1) * 7
  local alg = tonumber(ARGV[a + 1])
  local N = tonumber(ARGV[a + 2])
  local P = tonumber(ARGV[a + 3])
  local B = tonumber(ARGV[a + 4])
  local c = tonumber(ARGV[a + 5])
  local k = KEYS[i]
  if alg == 3 then
    local ts = num(t0)
    local ms = redis.call('ZRANGEBYSCORE', k, ts, ts)
    if #ms > 0 then
      -- remove the c highest-numbered members, keeping "ts:1..m" dense
      local idx = {}
      for j = 1, #ms do
        local p = string.find(ms[j], ':', 1, true)
        idx[j] = tonumber(string.sub(ms[j], p + 1))
      end
      table.sort(idx)
      local j = #idx
      while j >= 1 and #idx - j < c do
        redis.call('ZREM', k, ts .. ':' .. num(idx[j]))
        j = j - 1
      end
      done = done + 1
    end
  else
    local before, wrote = ARGV[a + 6], ARGV[a + 7]
    local v = redis.call('GET', k)
    if v and wrote ~= '' and v == wrote then
      if before == '' then redis.call('DEL', k)
      else redis.call('SET', k, before, 'KEEPTTL') end
      done = done + 1
    elseif v then
      local s = split(v)
      local nv
      if alg == 0 then
        nv = num(math.min(B, s[1] + c)) .. ' ' .. num(s[2])
      elseif alg == 1 then
        nv = num(s[1] - c * (P / N))
      elseif alg == 2 then
        local w = window(P)
        if s[1] == w then nv = num(s[1]) .. ' ' .. num(math.max(0, s[2] - c)) .. ' ' .. num(s[3])
        elseif s[1] == w + 1 then nv = num(s[1]) .. ' ' .. num(s[2]) .. ' ' .. num(math.max(0, s[3] - c)) end
      else
        local w = window(P)
        if s[1] == w then nv = num(s[1]) .. ' ' .. num(math.max(0, s[2] - c)) end
      end
      if nv then
        redis.call('SET', k, nv, 'KEEPTTL')
        done = done + 1
      end
    end
  end
end
return done
