-- report.lua: charge a report call (quota.Reporter: units instances
-- admitted on their own, package tiers/localfirst's async shares), or
-- resolve one whose reply never came. Every key must be in one cluster
-- slot.
--
-- KEYS[i]     state key of bucket i, i = 1..n (as take.lua's)
-- KEYS[n+1]   the call's record key (its first bucket's key, ":rc:", the
--             instance and the sequence number: in that key's slot)
-- ARGV[1]     now, or "" (state.lua, which the store prepends)
-- ARGV[2]     minimum key TTL in milliseconds (state.lua)
-- ARGV[3]     the record's TTL in milliseconds (quota.ReportRecordTTL)
-- ARGV[4]     mode: "r" report, "v" resolve
-- ARGV[5]     the buckets, packed as settle.lua packs them: n ("<d"), then
--             per bucket ("<Bdddd") the algorithm (TOKEN_BUCKET or GCRA),
--             rate N, period P in microseconds, burst B and the units u
--
-- Report: a call whose record exists (resolved as not applied, or sent
-- twice) changes nothing: reply {0}. Otherwise a bucket with u < 0 gets -u
-- units back with settle.lua's arithmetic (c = u; an absent state stays
-- absent, a full bucket), and any other is charged c = min(u, what it
-- holds), with the arithmetic of a take of c units (quota.Algorithm doc,
-- as memstore's Report):
--   token bucket   tokens = min(B, tokens + (elapsed * N) / P); holds
--                  floor(tokens) (0 below 0); tokens = tokens - c
--   GCRA           tat0 = max(tat, t); holds floor((B * T + SLACK -
--                  (tat0 - t)) / T) (0 below 0), one unit less while
--                  tat0 + c * T - t exceeds B * T + SLACK (rounding);
--                  tat = tat0 + c * T
-- An absent state is a full bucket; a state is written only when c > 0
-- (or c < 0 and the state exists), with the TTL take.lua would give it. The record is "1" when every
-- bucket was charged in full, else the units each could not be charged
-- (pack "<d" per bucket), kept for the record TTL. Reply: 1, then per
-- bucket the units charged and what it has left.
--
-- Resolve: the record, if any: "0" (resolved before) replies {0}; "1"
-- replies {1}; debts reply {1, then per bucket the units not charged}.
-- Without a record the call was not applied: the record "0" is written,
-- so that the call, if it reaches Redis later, changes nothing; reply
-- {0}.

local n = #KEYS - 1
local rk = KEYS[n + 1]
local recttl = ARGV[3]

if ARGV[4] == 'v' then
  local r = call('GET', rk)
  if not r then
    call('SET', rk, '0', 'PX', recttl)
    return {0}
  end
  if r == '0' then return {0} end
  if r == '1' then return {1} end
  local out = {1}
  local pos = 1
  for i = 1, #r / 8 do
    out[i + 1], pos = sunpack('<d', r, pos)
  end
  return out
end

local x = ARGV[5]
local m, pos = sunpack('<d', x)
if m ~= n or #x ~= 8 + 33 * n then
  error('report.lua: the buckets argument has ' .. #x .. ' bytes for ' .. m .. ' buckets and ' .. n .. ' state keys')
end

-- the call's record and the states, in one read
local vals = call('MGET', rk, unpack(KEYS, 1, n))
if vals[1] then return {0} end

local function floor0(y)
  if y > 0 then return y - y % 1 end
  return 0
end

local out = {1}
local owed -- per bucket, once one is not charged in full
for i = 1, n do
  local alg, N, P, B, u
  alg, N, P, B, u, pos = sunpack('<Bdddd', x, pos)
  local k = KEYS[i]
  local v = vals[i + 1]
  local c, rem
  if alg == TOKEN_BUCKET then
    local e0, tokens, ts = 0, B, now
    local live = v and #v == 24
    if live then e0, tokens, ts = sunpack('<ddd', v) end
    local elapsed = now - ts
    if elapsed < 0 then elapsed = 0 end
    local t = tokens + (elapsed * N) / P
    if t < B then tokens = t else tokens = B end
    if u < 0 then c = u -- given back whole, as settle.lua does
    else
      c = floor0(tokens)
      if u < c then c = u end
    end
    local t1 = tokens - c
    if t1 > B then t1 = B end
    rem = floor0(t1)
    if c > 0 or (c < 0 and live) then put(k, '<ddd', e0, t1, now, nil, ceil(((B - t1) * P) / N)) end
  else -- GCRA (ValidateReport refuses the other algorithms)
    local em = P / N
    local sl = SLACK -- at most half an emission interval
    if em / 2 < sl then sl = em / 2 end
    local tol = B * em + sl
    local t = now - EPOCH
    local e0, tat = 0, t
    local live = v and #v == 16
    if live then e0, tat = sunpack('<dd', v) end
    local tat1
    if u < 0 then -- given back whole, as settle.lua does
      c = u
      tat1 = tat + c * em
      if tat1 < t then tat1 = t end
    else
      if t > tat then tat = t end
      local left = floor0((tol - (tat - t)) / em)
      c = left
      if u < c then c = u end
      while c > 0 and tat + c * em - t > tol do
        c = c - 1
        if left < c then c = left end
      end
      tat1 = tat + c * em
    end
    rem = floor0((tol - (tat1 - t)) / em)
    if c > 0 or (c < 0 and live) then put(k, '<dd', e0, tat1, nil, nil, ceil(tat1 - t)) end
  end
  if c < u and not owed then
    owed = {}
    for j = 1, i - 1 do owed[j] = 0 end
  end
  if owed then owed[i] = u - c end
  out[2 * i], out[2 * i + 1] = c, rem
end
if owed then
  local parts = {}
  for i = 1, n do parts[i] = pack('<d', owed[i]) end
  call('SET', rk, table.concat(parts), 'PX', recttl)
else
  call('SET', rk, '1', 'PX', recttl)
end
return out
