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
-- ARGV[5]     the buckets: n ("<d"), then per bucket ("<Bddddddd") the
--             algorithm, rate N, period P in microseconds, burst B, the
--             units u, for a window algorithm the time a its units were
--             admitted (quota.Bucket.Admitted, µs; 0 otherwise), and a
--             calendar window's start and end (quota.Bucket.Span, µs; 0
--             and 0 without one)
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
-- A window algorithm's bucket is charged u (c = u, never denied) in the
-- window that holds a (a = min(a, now)) while that window counts, and
-- nothing once it is over (quota.Reporter's arithmetic, as memstore's):
--   fixed window   floor(a / W) == w: count = max(0, count + u); with a
--                  calendar window [s, z): now < z and no later window
--                  stored: count = max(0, count + u), win = s (as
--                  take.lua's calendar windows)
--   sliding window floor(a / W) == w: curr = max(0, curr + u);
--   counter        floor(a / W) == w - 1: prev = max(0, prev + u)
--   sliding window a > now - W: u > 0: u entries at a (named as take.lua
--   log            names them); u < 0: the -u newest entries at or
--                  before a removed (at each timestamp the
--                  highest-numbered first, as settle.lua removes them)
-- c is then the change of the count, and the remaining what a take of 0
-- would report.
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

local recttl = ARGV[3]
local resolve = ARGV[4] == 'v'

local function floor0(y)
  if y > 0 then return y - y % 1 end
  return 0
end

-- window returns the index of the window of length W holding t, exact
-- for t < 2^53
local function window(t, W)
  local w = t / W
  w = w - w % 1
  if w * W > t then w = w - 1 elseif (w + 1) * W <= t then w = w + 1 end
  return w
end

-- chargeWindow charges the window algorithm's bucket at key k, its state
-- v as read, u units admitted at a, and returns what it charged and the
-- remaining.
local function chargeWindow(alg, k, v, N, P, u, a, s0, s1)
  local W, L = P, N
  if a > now then a = now end
  local w = window(now, W)
  local c = 0
  if alg == FIXED_WINDOW then
    local ws, z = w * W, (w + 1) * W
    local tu, counts = z - now, window(a, W) == w
    if s1 ~= 0 then -- a calendar window: identified by its start
      w, ws, z = s0, s0, s1
      tu = s1 - now
      if tu < 1 then tu = 1 end
    end
    local e0, count, sw = fwread(v, w, now)
    if s1 ~= 0 then counts = now < s1 and not (sw and sw > w) end
    if counts and (u > 0 or count > 0) then
      local nc = count + u
      if nc < 0 then nc = 0 end
      c, count = nc - count, nc
      put(k, '<dddd', e0, w, count, z, nil, tu)
    end
    local rem = L - count
    if rem < 0 then rem = 0 end
    return c, rem
  elseif alg == SLIDING_WINDOW_COUNTER then
    local e0, curr, prev = swcread(v, w, W, now)
    local wa = window(a, W)
    if wa == w and (u > 0 or curr > 0) then
      local nc = curr + u
      if nc < 0 then nc = 0 end
      c, curr = nc - curr, nc
    elseif wa == w - 1 and (u > 0 or prev > 0) then
      local np = prev + u
      if np < 0 then np = 0 end
      c, prev = np - prev, np
    end
    if c ~= 0 then put(k, '<ddddd', e0, w, curr, prev, W, (w + 2) * W - now) end
    local e = now - w * W
    return c, floor0(L - ((prev * (W - e)) / W + curr))
  end
  -- SLIDING_WINDOW_LOG
  call('ZREMRANGEBYSCORE', k, '-inf', fmt('%.17g', now - W))
  if a > now - W then
    if u > 0 then
      logadd(k, a, u)
      call('PEXPIRE', k, fmt('%d', ttl(W)))
      c = u
    elseif u < 0 then
      c = -loggiveback(k, fmt('%.17g', a), -u)
    end
  end
  local rem = L - call('ZCARD', k)
  if rem < 0 then rem = 0 end
  return c, rem
end

-- resolve1 resolves one call from its record r (read first: GET rk).
local function resolve1(rk, r)
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

-- report1 charges one call: K[1..n] its state keys, rk its record key, x
-- its buckets argument, vals its record and states (read first: MGET rk
-- and K).
local function report1(K, n, rk, x, vals)
  if vals[1] then return {0} end
  local m, pos = sunpack('<d', x)
  if m ~= n or #x ~= 8 + 57 * n then
    error('report.lua: the buckets argument has ' .. #x .. ' bytes for ' .. m .. ' buckets and ' .. n .. ' state keys')
  end
  local out = {1}
  local owed -- per bucket, once one is not charged in full
  for i = 1, n do
    local alg, N, P, B, u, a, s0, s1
    alg, N, P, B, u, a, s0, s1, pos = sunpack('<Bddddddd', x, pos)
    local k = K[i]
    local v = vals[i + 1]
    local c, rem
    if alg ~= TOKEN_BUCKET and alg ~= GCRA then
      c, rem = chargeWindow(alg, k, v, N, P, u, a, s0, s1)
    elseif alg == TOKEN_BUCKET then
      local e0, tokens, _, live = tbnow(v, B, N, P, now)
      if u < 0 then c = u -- given back whole, as settle.lua does
      else
        c = floor0(tokens)
        if u < c then c = u end
      end
      local t1 = tokens - c
      if t1 > B then t1 = B end
      rem = floor0(t1)
      if c > 0 or (c < 0 and live) then
        put(k, '<ddddd', e0, t1, now, B, N / P, ceil(((B - t1) * P) / N))
      end
    else -- GCRA
      local em = P / N
      local sl = SLACK -- at most half an emission interval
      if em / 2 < sl then sl = em / 2 end
      local tol = B * em + sl
      local t = now - EPOCH
      local e0, tat, _, _, live = gcraread(v, em, t)
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
      if c > 0 or (c < 0 and live) then put(k, '<ddd', e0, tat1, em, nil, nil, ceil(tat1 - t)) end
    end
    if c ~= u and not owed then
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
end

-- read returns what a call reads before anything is written: its record
-- (resolve), or its record and its states, in one read (report).
local function read(K, n, rk)
  if resolve then return call('GET', rk) end
  return call('MGET', rk, unpack(K, 1, n))
end

-- run resolves or charges one call from what read returned.
local function run(K, n, rk, x, vals)
  if resolve then return resolve1(rk, vals) end
  return report1(K, n, rk, x, vals)
end

if not NODE then
  local n = #KEYS - 1
  local rk = KEYS[n + 1]
  return run(KEYS, n, rk, ARGV[5], read(KEYS, n, rk))
end

-- A node call (reportNodeScript): the calls of several slots of one
-- cluster node. Its one declared key routes it; ARGV[5] is the number of
-- calls G, then per call its number of state keys n, its keys, its record
-- key and its buckets argument. Every call's record and states are read
-- before anything is written, so a key of a slot the node no longer
-- serves fails the whole call before it changed anything. Reply: per
-- call, the length of its reply, then its reply.
local G, o = tonumber(ARGV[5]), 6
local calls = {}
for g = 1, G do
  local n = tonumber(ARGV[o])
  local K = {unpack(ARGV, o + 1, o + n)}
  local rk = ARGV[o + n + 1]
  calls[g] = {K, n, rk, ARGV[o + n + 2], read(K, n, rk)}
  o = o + n + 3
end
local out = {}
for g = 1, G do
  local c = calls[g]
  local r = run(c[1], c[2], c[3], c[4], c[5])
  out[#out + 1] = #r
  for i = 1, #r do out[#out + 1] = r[i] end
end
return out
