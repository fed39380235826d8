-- report.lua: charge instances' reports of units they admitted on their
-- own (tiers.Reporter; package tiers/localfirst's async shares). Each
-- report is decided on its own and never denied: it counts the units no
-- earlier attempt of its instance counted and charges as many of them as
-- the bucket holds. Every key must be in one cluster slot.
--
-- KEYS[i]     state key of report i's bucket, i = 1..n (as take.lua's)
-- KEYS[n+i]   its mark key: what this instance last reported of it
-- ARGV[1]     now, integer microseconds since the Unix epoch, or "" to
--             read Redis TIME (as take.lua)
-- ARGV[2]     minimum key TTL in milliseconds (at least 1), as take.lua's
-- ARGV[3]     a mark's TTL in milliseconds (tiers.ReportMarkTTL)
-- ARGV[4]     the reports, packed: n ("<d"), then per report
--             ("<Bddddddd") the algorithm (0 token bucket, 1 GCRA), rate
--             N, period P in microseconds, burst B, the units u, Seq,
--             Acked and Since
--
-- A mark is the string pack('<ddd', seq, count, owed): the Seq of the
-- last report applied, the count acknowledged after it, and what it
-- counted and could not charge. With a live mark (ms, mc, mo), a report
-- whose Seq is not above ms changes nothing (an old attempt reaching
-- Redis late). When the mark is one of the attempts whose reply the
-- instance never had (ms >= Since > 0), the report counts u less what
-- the attempts since its Acked counted (mc - Acked, when positive), at
-- least 0, plus mo (that attempt's debt, which its instance never
-- learned); any other report counts u. The mark becomes
-- (Seq, Acked + max(u, mc - Acked), counted - charged). Without a mark
-- (never reported, or forgotten after its TTL) a report counts u.
--
-- The charge c = min(counted, what the bucket holds), with the arithmetic
-- of a take of c units (tiers.Algorithm doc, as memstore's Report):
--   token bucket   tokens = min(B, tokens + (elapsed * N) / P); holds
--                  floor(tokens) (0 below 0); tokens = tokens - c
--   GCRA           tat0 = max(tat, t); holds floor((B * T + SLACK -
--                  (tat0 - t)) / T) (0 below 0), one unit less while
--                  tat0 + c * T - t exceeds B * T + SLACK (rounding);
--                  tat = tat0 + c * T
-- An absent state is a full bucket. A state is written only when c > 0,
-- with the TTL take.lua would give it.
--
-- Reply: 5 integers per report: applied (1/0), counted, charged, the
-- count to acknowledge (Acked of the next report) and the bucket's
-- remaining after the charge.

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
local EPOCH = 1767225600000000
local SLACK = 0.5
local minttl = tonumber(ARGV[2])
local markttl = ARGV[3]
local MAXTTL = 1e13

local x = ARGV[4]
local n, pos = sunpack('<d', x)
if 2 * n ~= #KEYS or #x ~= 8 + 57 * n then
  error('report.lua: the reports argument has ' .. #x .. ' bytes for ' .. n .. ' reports and ' .. #KEYS .. ' keys')
end

local function ceil(y)
  local f = y % 1
  if f == 0 then return y end
  return y - f + 1
end

local function floor0(y)
  if y > 0 then return y - y % 1 end
  return 0
end

-- ttl returns the key's TTL in ms for a state that needs tu µs, at least
-- the min TTL
local function ttl(tu)
  local ms = ceil(tu / 1000)
  if ms < minttl then ms = minttl end
  if ms > MAXTTL then ms = MAXTTL end
  return ms
end

-- states written by this call, by key: a key may recur (reports of
-- several instances), and a later report reads what an earlier one wrote
local cur = {}

-- put writes a string state as settle.lua does: its layout sf, the
-- deadline e0 it was read with (0: none), its numbers and the µs it needs
local function put(k, sf, e0, x1, x2, x3, tu)
  local st
  if rtime then
    local d = nowms + ttl(tu)
    if e0 >= d then
      st = pack(sf, e0, x1, x2, x3)
      call('SET', k, st, 'KEEPTTL')
    else
      local E = ceil(d + minttl)
      st = pack(sf, E, x1, x2, x3)
      call('SET', k, st, 'PXAT', fmt('%d', E))
    end
  else
    st = pack(sf, 0, x1, x2, x3)
    call('SET', k, st, 'PX', fmt('%d', ttl(tu)))
  end
  cur[k] = st
end

local vals = call('MGET', unpack(KEYS))
local out = {}
for i = 1, n do
  local alg, N, P, B, u, seq, acked, since
  alg, N, P, B, u, seq, acked, since, pos = sunpack('<Bddddddd', x, pos)
  local k, mk = KEYS[i], KEYS[n + i]
  local mv = vals[n + i]
  local apply, counted, count = true, u, acked + u
  if mv and #mv == 24 then
    local ms, mc, mo = sunpack('<ddd', mv)
    if seq <= ms then
      apply, counted, count = false, 0, mc
    elseif since ~= 0 and ms >= since then
      -- the mark is an attempt whose reply the instance never had: what
      -- the attempts since acked counted is not counted again, and what
      -- that one could not charge is
      local before = mc - acked
      if before <= 0 then counted = u + mo
      elseif before >= u then counted, count = mo, mc
      else counted = u - before + mo end
    end
  end
  local v = cur[k] or vals[i]
  local c, rem = 0, 0
  if alg == 0 then -- token bucket
    local e0, tokens, ts = 0, B, now
    if v and #v == 24 then e0, tokens, ts = sunpack('<ddd', v) end
    local elapsed = now - ts
    if elapsed < 0 then elapsed = 0 end
    local t = tokens + (elapsed * N) / P
    if t < B then tokens = t else tokens = B end
    if apply then
      c = floor0(tokens)
      if counted < c then c = counted end
    end
    local t1 = tokens - c
    rem = floor0(t1)
    if c > 0 then put(k, '<ddd', e0, t1, now, nil, ceil(((B - t1) * P) / N)) end
  else -- GCRA
    local em = P / N
    local tol = B * em + SLACK
    local t = now - EPOCH
    local e0, tat = 0, t
    if v and #v == 16 then e0, tat = sunpack('<dd', v) end
    if t > tat then tat = t end
    local left = floor0((tol - (tat - t)) / em)
    if apply then
      c = left
      if counted < c then c = counted end
      while c > 0 and tat + c * em - t > tol do
        c = c - 1
        if left < c then c = left end
      end
    end
    local tat1 = tat + c * em
    rem = floor0((tol - (tat1 - t)) / em)
    if c > 0 then put(k, '<dd', e0, tat1, nil, nil, ceil(tat1 - t)) end
  end
  if apply then
    call('SET', mk, pack('<ddd', seq, count, counted - c), 'PX', markttl)
    out[#out + 1] = 1
  else
    out[#out + 1] = 0
  end
  out[#out + 1] = counted
  out[#out + 1] = c
  out[#out + 1] = count
  out[#out + 1] = rem
end
return out
