-- take.lua: charge every bucket its cost if and only if every bucket allows
-- it (all or nothing), with the arithmetic of the tiers.Algorithm doc.
--
-- KEYS[i]   state key of bucket i, i = 1..n (all in one cluster slot)
-- ARGV[1]   now, integer microseconds since the Unix epoch, or "" to read
--           Redis TIME
-- ARGV[2]   mode: "t" take; "p" take and also report each bucket's
--           remaining and reset before the charge, and its state before
--           and after (multi-slot cluster takes, which may have to refund)
-- ARGV[3]   minimum key TTL in milliseconds (at least 1)
-- ARGV[3+5(i-1)+1 .. 3+5i]  bucket i: algorithm (0 token bucket, 1 GCRA,
--           2 sliding window counter, 3 sliding window log, 4 fixed
--           window), rate N, period P in microseconds, burst B, cost c
--
-- Reply: array of integers
--   [1] 1 if every bucket allowed and all were charged, else 0
--   [2] now used, in microseconds
--   then per bucket i: allowed (1/0), remaining, reset in microseconds,
--   retry_after in microseconds (0 when allowed, -1 = never);
--   in mode "p" four more: remaining and reset before any charge, then
--   (bulk strings) the key's raw state before the take and the state the
--   take computed ("" when the key was absent or the algorithm is the
--   sliding window log; the computed state is reported even when the take
--   denied and so wrote nothing).
--
-- State per key (strings hold numbers written with %.17g, which read back
-- exactly):
--   token bucket            "tokens ts"
--   GCRA                    "tat" (µs since tiers.GCRAEpoch)
--   sliding window counter  "win curr prev"
--   fixed window            "win count"
--   sliding window log      sorted set: one member per admitted unit,
--                           score = its timestamp, member "ts:k" with k
--                           counting 1.. the units sharing that timestamp
--
-- This script runs on every decision and Redis CPU is the throughput
-- limit, so it is written for cost: one pass over the buckets, no table
-- per bucket, the reply filled in place with the charged values (patched
-- to the uncharged ones if the take denies), the algorithm compared as a
-- string, math.min/max and the TTL and duration clamps inlined (in the
-- same comparison order, so NaN and ties behave as before), all string
-- states read by one MGET, repeated period and cost arguments parsed once,
-- and a state string built only when it can be written or must be
-- reported (whole token counts with %d, which prints what %.17g does).

local call = redis.call
local tonumber, fmt, find, sub = tonumber, string.format, string.find, string.sub
local floor, ceil = math.floor, math.ceil
local ARGV, KEYS = ARGV, KEYS

local now
if ARGV[1] == '' then
  local t = call('TIME')
  now = tonumber(t[1]) * 1000000 + tonumber(t[2])
else
  now = tonumber(ARGV[1])
end
local pre = ARGV[2] == 'p'
-- GCRA works in µs since tiers.GCRAEpoch (2026-01-01T00:00:00Z), with the
-- tolerance tiers.GCRASlack; both must equal the Go constants.
local EPOCH = 1767225600000000
local SLACK = 0.5
local minttl = tonumber(ARGV[3])

-- TTLs (ceil(µs / 1000) ms, at least minttl) are capped at 1e13 ms (317
-- years, beyond any time.Duration): a larger one would reach Redis in
-- exponent form and fail the take
local MAXTTL = 1e13

-- durations in the reply are capped at 2^62 µs, an exact double above the
-- largest time.Duration (about 9.2e15 µs), which the Go side saturates;
-- a double of 2^63 or more has no Redis integer
local MAXUS = 2 ^ 62

local nows -- ' ' .. now in %.17g, the token bucket state's tail

local n = #KEYS
local all = true
local per = pre and 8 or 4
local out = {1, now} -- the reply, per bucket with the charged values
-- per bucket i: remaining and reset before the charge (u[4i-3], u[4i-2]),
-- state to SET (false: log) and its TTL in ms (u[4i-1], u[4i])
local u = {}
-- every state string in one MGET (a log's sorted set reads as nil; a
-- string-state key holding another type reads as absent rather than
-- failing the take, and is then overwritten); unpack has a stack limit,
-- so a take of more than 1000 buckets reads them one by one
local vals
if n <= 1000 then vals = call('MGET', unpack(KEYS))
else
  vals = {}
  for i = 1, n do
    if ARGV[3 + i * 5 - 4] == '3' then vals[i] = false
    else vals[i] = call('GET', KEYS[i]) end
  end
end

local lastPs, lastP, lastcs, lastc -- the last period and cost, raw and parsed
for i = 1, n do
  local a = 3 + (i - 1) * 5
  local alg = ARGV[a + 1]
  local Ns, Bs, Ps, cs = ARGV[a + 2], ARGV[a + 4], ARGV[a + 3], ARGV[a + 5]
  local N = tonumber(Ns)
  local B = N
  if Bs ~= Ns then B = tonumber(Bs) end
  -- buckets of one take mostly share period and cost: parse each once
  if Ps ~= lastPs then lastPs, lastP = Ps, tonumber(Ps) end
  if cs ~= lastcs then lastcs, lastc = cs, tonumber(cs) end
  local P, c = lastP, lastc
  local k = KEYS[i]
  -- allowed, retry, remaining and reset before (0) and after (1) the
  -- charge, state before, state to write and its TTL in µs
  local allow, ra, rem0, rst0, rem1, rst1, v, s, tu

  if alg == '0' then -- token bucket
    local tokens, ts = B, now
    v = vals[i]
    if v then
      local p = find(v, ' ', 1, true)
      tokens, ts = tonumber(sub(v, 1, p - 1)), tonumber(sub(v, p + 1))
    end
    local elapsed = now - ts
    if elapsed < 0 then elapsed = 0 end
    local t = tokens + (elapsed * N) / P
    if t < B then tokens = t else tokens = B end
    allow = c <= tokens
    local t1 = tokens - c
    rst0 = ceil(((B - tokens) * P) / N)
    rem0 = floor(tokens)
    rem1 = floor(t1)
    rst1 = ceil(((B - t1) * P) / N)
    if allow then ra = 0 elseif c > B then ra = -1 else ra = ceil(((c - tokens) * P) / N) end
    if pre or (all and allow) then
      if not nows then nows = ' ' .. fmt('%.17g', now) end
      -- a whole number of tokens (the common case: a full bucket less an
      -- integer cost) prints the same with %d, which is cheaper
      if t1 % 1 == 0 and t1 > 0 and t1 < 1e15 then s = fmt('%d', t1) .. nows
      else s = fmt('%.17g', t1) .. nows end
    end
    tu = rst1

  elseif alg == '1' then -- GCRA
    local T = P / N
    local BT = B * T
    local tol = BT + SLACK
    local t = now - EPOCH
    local tat = t
    v = vals[i]
    if v then tat = tonumber(v) end
    local tat0 = tat
    if t > tat0 then tat0 = t end
    local tat1 = tat0 + c * T
    allow = tat1 - t <= tol
    rem0 = floor((tol - (tat0 - t)) / T)
    rem1 = floor((tol - (tat1 - t)) / T)
    if rem0 < 0 then rem0 = 0 end
    if rem1 < 0 then rem1 = 0 end
    rst0 = ceil(tat0 - t)
    rst1 = ceil(tat1 - t)
    if allow then ra = 0 elseif c > B then ra = -1 else ra = ceil(tat1 - t - BT - SLACK) end
    if pre or (all and allow) then s = fmt('%.17g', tat1) end
    tu = rst1

  elseif alg == '2' then -- sliding window counter
    local W, L = P, N
    -- window index of now, exact for now < 2^53
    local w = floor(now / W)
    if w * W > now then w = w - 1 elseif (w + 1) * W <= now then w = w + 1 end
    local e = now - w * W
    local curr, prev = 0, 0
    v = vals[i]
    if v then
      local p = find(v, ' ', 1, true)
      local q = find(v, ' ', p + 1, true)
      local sw = tonumber(sub(v, 1, p - 1))
      if sw == w then curr, prev = tonumber(sub(v, p + 1, q - 1)), tonumber(sub(v, q + 1))
      elseif sw == w - 1 then prev = tonumber(sub(v, p + 1, q - 1)) end
    end
    local weighted = (prev * (W - e)) / W + curr
    allow = weighted + c <= L
    rem0 = floor(L - weighted)
    rem1 = floor(L - weighted - c)
    if rem0 < 0 then rem0 = 0 end
    if rem1 < 0 then rem1 = 0 end
    local rprev = 0
    if prev > 0 then rprev = (w + 1) * W - now end
    if curr > 0 then rst0 = (w + 2) * W - now else rst0 = rprev end
    if curr + c > 0 then rst1 = (w + 2) * W - now else rst1 = rprev end
    if allow then ra = 0
    elseif c > L then ra = -1
    elseif curr + c <= L then ra = ceil(W - ((L - curr - c) * W) / prev) - e
    else
      local x = W - ((L - c) * W) / curr
      if x > 0 then x = ceil(x) else x = ceil(0) end
      ra = (W - e) + x
    end
    if pre or (all and allow) then
      s = fmt('%.17g %.17g %.17g', w, curr + c, prev)
    end
    tu = (w + 2) * W - now

  elseif alg == '3' then -- sliding window log
    local W, L = P, N
    call('ZREMRANGEBYSCORE', k, '-inf', fmt('%.17g', now - W))
    local cnt = call('ZCARD', k)
    allow = cnt + c <= L
    -- a lowered limit can leave more counted than L: remaining is at least 0
    rem0 = L - cnt
    if rem0 < 0 then rem0 = 0 end
    rem1 = L - cnt - c
    if rem1 < 0 then rem1 = 0 end
    -- reset before a charge needs the newest entry: read it now in mode
    -- "p" or for a zero cost (which records nothing, so the reset after it
    -- is the same), else after the loop and only if the take denies (then
    -- nothing was charged and the log is as it stands)
    if cnt == 0 then rst0 = 0
    elseif pre or c == 0 then
      local newest = call('ZRANGE', k, -1, -1, 'WITHSCORES')
      rst0 = tonumber(newest[2]) + W - now
    else rst0 = false end
    if c > 0 then rst1 = W else rst1 = rst0 end
    if allow then ra = 0
    elseif c > L then ra = -1
    else
      local kth = cnt + c - L
      local r = call('ZRANGE', k, kth - 1, kth - 1, 'WITHSCORES')
      ra = tonumber(r[2]) + W - now
    end
    s = false
    tu = W

  else -- fixed window
    local W, L = P, N
    -- window index of now, exact for now < 2^53
    local w = floor(now / W)
    if w * W > now then w = w - 1 elseif (w + 1) * W <= now then w = w + 1 end
    local count = 0
    v = vals[i]
    if v then
      local p = find(v, ' ', 1, true)
      if tonumber(sub(v, 1, p - 1)) == w then count = tonumber(sub(v, p + 1)) end
    end
    allow = count + c <= L
    rem0 = L - count
    if rem0 < 0 then rem0 = 0 end
    rem1 = L - count - c
    if rem1 < 0 then rem1 = 0 end
    local r = (w + 1) * W - now
    rst0, rst1 = r, r
    if allow then ra = 0 elseif c > L then ra = -1 else ra = r end
    if pre or (all and allow) then s = fmt('%.17g %.17g', w, count + c) end
    tu = r
  end

  if not allow then all = false end
  local o = 2 + (i - 1) * per
  out[o + 1] = allow and 1 or 0
  if rst1 > MAXUS then out[o + 2], out[o + 3] = rem1, MAXUS
  else out[o + 2], out[o + 3] = rem1, rst1 end
  if ra > MAXUS then ra = MAXUS end
  out[o + 4] = ra
  local b = 4 * i
  u[b - 3], u[b - 2] = rem0, rst0
  if all then
    local ms = ceil(tu / 1000)
    if ms < minttl then ms = minttl end
    if ms > MAXTTL then ms = MAXTTL end
    u[b - 1], u[b] = s, ms
  end
  if pre then
    if rst0 > MAXUS then rst0 = MAXUS end
    out[o + 5], out[o + 6], out[o + 7], out[o + 8] = rem0, rst0, v or '', s or ''
  end
end

if all then
  for i = 1, n do
    local s = u[4 * i - 1]
    if s then
      call('SET', KEYS[i], s, 'PX', u[4 * i])
    else -- log: record c entries at now, named now:(have+1..have+c)
      local c = tonumber(ARGV[3 + i * 5])
      if c > 0 then
        local k = KEYS[i]
        local ts = fmt('%.17g', now)
        local have = call('ZCOUNT', k, ts, ts)
        local j = 1
        while j <= c do
          local args = {}
          local m = 0
          while j <= c and m < 1000 do
            args[m * 2 + 1] = ts
            args[m * 2 + 2] = ts .. ':' .. fmt('%.17g', have + j)
            m = m + 1
            j = j + 1
          end
          call('ZADD', k, unpack(args))
        end
        call('PEXPIRE', k, u[4 * i])
      end
    end
  end
  return out
end

out[1] = 0
for i = 1, n do
  local r0 = u[4 * i - 2]
  if r0 == false then
    local newest = call('ZRANGE', KEYS[i], -1, -1, 'WITHSCORES')
    r0 = tonumber(newest[2]) + tonumber(ARGV[3 + (i - 1) * 5 + 3]) - now
  end
  if r0 > MAXUS then r0 = MAXUS end
  local o = 2 + (i - 1) * per
  out[o + 2], out[o + 3] = u[4 * i - 3], r0
end
return out
