-- state.lua: the start of settle.lua and report.lua (the store prepends
-- it to each, after the generated prelude that starts every script): the
-- call's time, the writing of a string state with the TTL take.lua would
-- give it, and the adding and removing of a sliding window log's entries.
--
-- ARGV[1]   now, integer microseconds since the Unix epoch, or "" to read
--           Redis TIME (as take.lua)
-- ARGV[2]   minimum key TTL in milliseconds (at least 1), as take.lua's
--
-- TTLs, as take.lua sets them for the state written: with Redis time the
-- state's deadline E is kept (KEEPTTL) while it covers what the state
-- needs, else moved min TTL beyond it (PXAT); with a fixed time, PX the
-- need rounded up to whole ms, at least the min TTL.

local call = redis.call
local fmt = string.format
local pack, sunpack = struct.pack, struct.unpack

local now
if ARGV[1] == '' then
  local t = call('TIME')
  now = tonumber(t[1]) * 1000000 + tonumber(t[2])
else
  now = tonumber(ARGV[1])
end
local rtime = ARGV[1] == ''
local nowms = (now - now % 1000) / 1000
local minttl = tonumber(ARGV[2])
local MAXTTL = 1e13

local function ceil(y)
  local f = y % 1
  if f == 0 then return y end
  return y - f + 1
end

-- ttl returns the key's TTL in ms for a state that needs tu µs, at least
-- the min TTL
local function ttl(tu)
  local ms = ceil(tu / 1000)
  if ms < minttl then ms = minttl end
  if ms > MAXTTL then ms = MAXTTL end
  return ms
end

-- put writes a string state: its layout sf, the deadline e0 it was read
-- with (0: none), its numbers and the µs it needs.
local function put(k, sf, e0, x1, x2, x3, tu)
  if rtime then
    local d = nowms + ttl(tu)
    if e0 >= d then
      call('SET', k, pack(sf, e0, x1, x2, x3), 'KEEPTTL')
    else
      local E = ceil(d + minttl)
      call('SET', k, pack(sf, E, x1, x2, x3), 'PXAT', fmt('%d', E))
    end
  else
    call('SET', k, pack(sf, 0, x1, x2, x3), 'PX', fmt('%d', ttl(tu)))
  end
end

-- logadd records u entries at time ts (µs) in the sliding window log k,
-- named ts:(have+1..have+u) after the have entries already at ts, in
-- ZADDs of at most 1000 entries.
local function logadd(k, ts, u)
  local t = fmt('%.17g', ts)
  local have = call('ZCOUNT', k, t, t)
  local j = 1
  while j <= u do
    local args = {}
    local m = 0
    while j <= u and m < 1000 do
      args[m * 2 + 1] = t
      args[m * 2 + 2] = t .. ':' .. fmt('%.17g', have + j)
      m = m + 1
      j = j + 1
    end
    call('ZADD', k, unpack(args))
  end
end

-- loggiveback removes up to n entries scored at or below top (a score
-- bound as Redis reads one: fmt('%.17g', ts), or '+inf' for no bound) from
-- the sliding window log k, the newest timestamp first, at each the
-- highest-numbered entry first (so take.lua's numbering stays dense); it
-- returns how many it removed.
local function loggiveback(k, top, n)
  local left = n
  while left > 0 do
    local r = call('ZREVRANGEBYSCORE', k, top, '-inf', 'WITHSCORES', 'LIMIT', 0, 1)
    if #r == 0 then break end
    local ms = call('ZRANGEBYSCORE', k, r[2], r[2])
    local idx, byIdx = {}, {}
    for j = 1, #ms do
      local p = string.find(ms[j], ':', 1, true)
      local num = tonumber(string.sub(ms[j], p + 1))
      idx[j] = num
      byIdx[num] = ms[j]
    end
    table.sort(idx)
    local j = #idx
    while j >= 1 and left > 0 do
      call('ZREM', k, byIdx[idx[j]])
      j = j - 1
      left = left - 1
    end
    top = '(' .. r[2]
  end
  return n - left
end
