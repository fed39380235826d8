-- state.lua: the start of settle.lua and report.lua (the store prepends
-- it to each, after the generated prelude that starts every script and
-- log.lua): the call's time and the writing of a string state with the
-- TTL take.lua would give it.
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
-- with (0: none), its numbers (the last of them the limit it is written
-- under: carry.lua) and the µs it needs.
local function put(k, sf, e0, x1, x2, x3, x4, tu)
  if rtime then
    local d = nowms + ttl(tu)
    if e0 >= d then
      call('SET', k, pack(sf, e0, x1, x2, x3, x4), 'KEEPTTL')
    else
      local E = ceil(d + minttl)
      call('SET', k, pack(sf, E, x1, x2, x3, x4), 'PXAT', fmt('%d', E))
    end
  else
    call('SET', k, pack(sf, 0, x1, x2, x3, x4), 'PX', fmt('%d', ttl(tu)))
  end
end
