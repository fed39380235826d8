-- refund.lua: undo a charge made by take.lua, for multi-slot cluster takes
-- where another slot denied. Every key must be in one cluster slot.
--
-- KEYS[i]   state key of bucket i, i = 1..n
-- KEYS[n+1] (when ARGV[2] is not "") the refund's marker key, in the same
--           slot: the refund is applied only if the marker is not yet set,
--           and sets it (for ARGV[2] ms), so a refund whose reply was lost
--           can be sent again without giving the units back twice
-- ARGV[1]   the now (integer microseconds) the charging take.lua used
-- ARGV[2]   the marker's TTL in ms, or "" for no marker
-- ARGV[3(i-1)+3 .. 3i+2]  bucket i: its limit and cost (packed as for
--           take.lua: algorithm, rate N, period P in microseconds, burst
--           B, cost c; for a calendar window SPAN on the algorithm and the
--           window's start in microseconds after the cost), then the key's
--           state before the take and the state the take wrote (as
--           take.lua reported them in mode "p"; "" = absent)
--
-- Reply: integer, the number of buckets whose state was restored, or -1
-- when the marker was already set (an earlier send of this refund ran).
--
-- When the key still holds exactly what the take wrote (no other take
-- touched it since), the old state is put back byte for byte (or the key
-- deleted if it was absent), so the bucket is as if never charged. When
-- another take came in between, the units are given back arithmetically,
-- in the limit the state was written under (carry.lua):
-- token bucket tokens + c (capped at B), GCRA tat - c*T (both exact up to
-- one rounding of a double; the GCRA tat is in µs since quota.GCRAEpoch,
-- as take.lua stores it, and subtracting c*T needs no epoch), the window
-- counters minus c when the charged window (a calendar window: the one
-- take.lua charged) is still current (or now previous); the log always loses c of its
-- entries at the charge's timestamp, which is exact. TTLs are kept: the
-- charged state's TTL is never shorter than the old state's.

local fmt = string.format
local floor = math.floor
local pack, sunpack = struct.pack, struct.unpack
local function num(x) return fmt('%.17g', x) end

local t0 = tonumber(ARGV[1])
-- a state's numbers, as take.lua packs them (little-endian doubles: the
-- key's deadline, then n numbers of the algorithm); nil for a string of
-- another length, which take.lua reads as absent. The deadline is kept:
-- the key's TTL, which a refund keeps, is never shorter.
local layouts = {'<dd', '<ddd', '<dddd', '<ddddd'}
local function split(v)
  local n = #v / 8 - 1
  if not layouts[n] then return nil end
  local s = {sunpack(layouts[n], v)}
  s[n + 2] = nil -- unpack's next position
  return s, n + 1
end
local function window(W)
  local w = floor(t0 / W)
  if w * W > t0 then w = w - 1 elseif (w + 1) * W <= t0 then w = w + 1 end
  return w
end

local n = #KEYS
if ARGV[2] ~= '' then
  n = n - 1
  if not redis.call('SET', KEYS[n + 1], '1', 'NX', 'PX', ARGV[2]) then return -1 end
end

local done = 0
for i = 1, n do
  local a = 2 + (i - 1) * 3
  local alg, N, P, B, c, pos = sunpack('<Bdddd', ARGV[a + 1])
  local cw -- the charged window: a calendar window's start, else by P
  if alg >= SPAN then alg = alg - SPAN; cw = sunpack('<d', ARGV[a + 1], pos) end
  local k = KEYS[i]
  if alg == SLIDING_WINDOW_LOG then
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
    local before, wrote = ARGV[a + 2], ARGV[a + 3]
    local v = redis.call('GET', k)
    if v and wrote ~= '' and v == wrote then
      if before == '' then redis.call('DEL', k)
      else redis.call('SET', k, before, 'KEEPTTL') end
      done = done + 1
    elseif v then
      -- a state as take.lua writes it now (with the limit it was
      -- written under, carry.lua), or as it wrote it before states
      -- recorded their limit (read under the limit in force)
      local nv
      local s, ns = split(v)
      if not s then
      elseif alg == TOKEN_BUCKET then
        if ns == 5 then
          nv = pack('<ddddd', s[1], math.min(s[4], s[2] + c), s[3], s[4], s[5])
        elseif ns == 3 then nv = pack('<ddd', s[1], math.min(B, s[2] + c), s[3]) end
      elseif alg == GCRA then
        if ns == 3 then nv = pack('<ddd', s[1], s[2] - c * s[3], s[3])
        elseif ns == 2 then nv = pack('<dd', s[1], s[2] - c * (P / N)) end
      elseif alg == SLIDING_WINDOW_COUNTER then
        -- the charged window, as the state's window counts it (a state
        -- since written under another window is left as it is)
        local w = window(P)
        if ns == 4 then s[5] = P end
        if (ns == 4 or ns == 5) and s[5] == P then
          if s[2] == w then s[3] = math.max(0, s[3] - c)
          elseif s[2] == w + 1 then s[4] = math.max(0, s[4] - c)
          else s = nil end
          if s then nv = pack(layouts[ns - 1], unpack(s, 1, ns)) end
        end
      else -- FIXED_WINDOW
        local w = cw or window(P)
        if (ns == 3 or ns == 4) and s[2] == w then
          s[3] = math.max(0, s[3] - c)
          nv = pack(layouts[ns - 1], unpack(s, 1, ns))
        end
      end
      if nv then
        redis.call('SET', k, nv, 'KEEPTTL')
        done = done + 1
      end
    end
  end
end
return done
