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
--   take wrote ("" when the key was absent, nothing was written, or the
--   algorithm is the sliding window log).
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

local fmt = string.format
local floor, ceil = math.floor, math.ceil
local function num(x) return fmt('%.17g', x) end

local now
if ARGV[1] == '' then
  local t = redis.call('TIME')
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

-- TTLs are capped at 1e13 ms (317 years, beyond any time.Duration): a
-- number passed to redis.call is formatted with %.14g, so a larger one
-- would reach Redis in exponent form and fail the take
local MAXTTL = 1e13
local function ttl(us)
  local ms = ceil(us / 1000)
  if ms < minttl then ms = minttl end
  if ms > MAXTTL then ms = MAXTTL end
  return ms
end

-- durations in the reply are capped at 2^62 µs, an exact double above the
-- largest time.Duration (about 9.2e15 µs), which the Go side saturates;
-- a double of 2^63 or more has no Redis integer
local MAXUS = 2 ^ 62
local function dur(us)
  if us > MAXUS then return MAXUS end
  return us
end

-- window index of now for a window of W µs, exact for now < 2^53
local function window(W)
  local w = floor(now / W)
  if w * W > now then w = w - 1 elseif (w + 1) * W <= now then w = w + 1 end
  return w
end

local find, sub = string.find, string.sub
-- the numbers of a state string "a b [c]"
local function split(v)
  local p = find(v, ' ', 1, true)
  if not p then return tonumber(v) end
  local q = find(v, ' ', p + 1, true)
  if not q then return tonumber(sub(v, 1, p - 1)), tonumber(sub(v, p + 1)) end
  return tonumber(sub(v, 1, p - 1)), tonumber(sub(v, p + 1, q - 1)), tonumber(sub(v, q + 1))
end

local n = #KEYS
local all = true
-- per bucket: allowed, charged values, uncharged values, retry, save args
local ok, rem1, rst1, rem0, rst0, retry, save = {}, {}, {}, {}, {}, {}, {}
local old = {} -- raw state before the take ("" when absent or a log)

for i = 1, n do
  local a = 3 + (i - 1) * 5
  local alg = tonumber(ARGV[a + 1])
  local N = tonumber(ARGV[a + 2])
  local P = tonumber(ARGV[a + 3])
  local B = tonumber(ARGV[a + 4])
  local c = tonumber(ARGV[a + 5])
  local k = KEYS[i]
  local allow, ra

  if alg == 0 then -- token bucket
    local tokens, ts = B, now
    local v = redis.call('GET', k)
    old[i] = v or ''
    if v then tokens, ts = split(v) end
    local elapsed = now - ts
    if elapsed < 0 then elapsed = 0 end
    tokens = math.min(B, tokens + (elapsed * N) / P)
    allow = c <= tokens
    local t1 = tokens - c
    rst0[i] = ceil(((B - tokens) * P) / N)
    rem0[i] = floor(tokens)
    rem1[i] = floor(t1)
    rst1[i] = ceil(((B - t1) * P) / N)
    if allow then ra = 0 elseif c > B then ra = -1 else ra = ceil(((c - tokens) * P) / N) end
    save[i] = {'SET', k, num(t1) .. ' ' .. num(now), 'PX', ttl(rst1[i])}

  elseif alg == 1 then -- GCRA
    local T = P / N
    local BT = B * T
    local tol = BT + SLACK
    local t = now - EPOCH
    local tat = t
    local v = redis.call('GET', k)
    old[i] = v or ''
    if v then tat = tonumber(v) end
    local tat0 = math.max(tat, t)
    local tat1 = tat0 + c * T
    allow = tat1 - t <= tol
    local r0 = floor((tol - (tat0 - t)) / T)
    local r1 = floor((tol - (tat1 - t)) / T)
    if r0 < 0 then r0 = 0 end
    if r1 < 0 then r1 = 0 end
    rem0[i], rem1[i] = r0, r1
    rst0[i] = ceil(tat0 - t)
    rst1[i] = ceil(tat1 - t)
    if allow then ra = 0 elseif c > B then ra = -1 else ra = ceil(tat1 - t - BT - SLACK) end
    save[i] = {'SET', k, num(tat1), 'PX', ttl(rst1[i])}

  elseif alg == 2 then -- sliding window counter
    local W, L = P, N
    local w = window(W)
    local e = now - w * W
    local curr, prev = 0, 0
    local v = redis.call('GET', k)
    old[i] = v or ''
    if v then
      local sw, sc, sp = split(v)
      if sw == w then curr, prev = sc, sp
      elseif sw == w - 1 then prev = sc end
    end
    local weighted = (prev * (W - e)) / W + curr
    allow = weighted + c <= L
    local r0 = floor(L - weighted)
    local r1 = floor(L - weighted - c)
    if r0 < 0 then r0 = 0 end
    if r1 < 0 then r1 = 0 end
    rem0[i], rem1[i] = r0, r1
    local rprev = 0
    if prev > 0 then rprev = (w + 1) * W - now end
    if curr > 0 then rst0[i] = (w + 2) * W - now else rst0[i] = rprev end
    if curr + c > 0 then rst1[i] = (w + 2) * W - now else rst1[i] = rprev end
    if allow then ra = 0
    elseif c > L then ra = -1
    elseif curr + c <= L then ra = ceil(W - ((L - curr - c) * W) / prev) - e
    else ra = (W - e) + ceil(math.max(0, W - ((L - c) * W) / curr)) end
    save[i] = {'SET', k, num(w) .. ' ' .. num(curr + c) .. ' ' .. num(prev), 'PX', ttl((w + 2) * W - now)}

  elseif alg == 3 then -- sliding window log
    local W, L = P, N
    redis.call('ZREMRANGEBYSCORE', k, '-inf', num(now - W))
    local cnt = redis.call('ZCARD', k)
    allow = cnt + c <= L
    -- a lowered limit can leave more counted than L: remaining is at least 0
    rem0[i] = math.max(0, L - cnt)
    rem1[i] = math.max(0, L - cnt - c)
    -- reset before a charge needs the newest entry: read it now in mode
    -- "p" or for a zero cost (which records nothing, so the reset after it
    -- is the same), else after the loop and only if the take denies (then
    -- nothing was charged and the log is as it stands)
    if cnt == 0 then rst0[i] = 0
    elseif pre or c == 0 then
      local newest = redis.call('ZRANGE', k, -1, -1, 'WITHSCORES')
      rst0[i] = tonumber(newest[2]) + W - now
    else rst0[i] = false end
    if c > 0 then rst1[i] = W else rst1[i] = rst0[i] end
    if allow then ra = 0
    elseif c > L then ra = -1
    else
      local kth = cnt + c - L
      local r = redis.call('ZRANGE', k, kth - 1, kth - 1, 'WITHSCORES')
      ra = tonumber(r[2]) + W - now
    end
    save[i] = {'LOG', k, c, ttl(W)}

  else -- fixed window
    local W, L = P, N
    local w = window(W)
    local count = 0
    local v = redis.call('GET', k)
    old[i] = v or ''
    if v then
      local sw, sc = split(v)
      if sw == w then count = sc end
    end
    allow = count + c <= L
    rem0[i] = math.max(0, L - count)
    rem1[i] = math.max(0, L - count - c)
    local r = (w + 1) * W - now
    rst0[i], rst1[i] = r, r
    if allow then ra = 0 elseif c > L then ra = -1 else ra = r end
    save[i] = {'SET', k, num(w) .. ' ' .. num(count + c), 'PX', ttl(r)}
  end

  if old[i] == nil then old[i] = '' end
  ok[i], retry[i] = allow, ra
  if not allow then all = false end
end

-- record c entries at now in the log k, named now:(have+1..have+c)
local function save_log(k, c, ttlms)
  local ts = num(now)
  local have = redis.call('ZCOUNT', k, ts, ts)
  local j = 1
  while j <= c do
    local args = {}
    local m = 0
    while j <= c and m < 1000 do
      args[m * 2 + 1] = ts
      args[m * 2 + 2] = ts .. ':' .. num(have + j)
      m = m + 1
      j = j + 1
    end
    redis.call('ZADD', k, unpack(args))
  end
  redis.call('PEXPIRE', k, ttlms)
end

if all then
  for i = 1, n do
    local s = save[i]
    if s[1] == 'LOG' then
      if s[3] > 0 then save_log(s[2], s[3], s[4]) end
    else
      redis.call(s[1], s[2], s[3], s[4], s[5])
    end
  end
end

if not all then
  for i = 1, n do
    if rst0[i] == false then
      local newest = redis.call('ZRANGE', KEYS[i], -1, -1, 'WITHSCORES')
      rst0[i] = tonumber(newest[2]) + tonumber(ARGV[3 + (i - 1) * 5 + 3]) - now
    end
  end
end

local out = {all and 1 or 0, now}
local w = 2
for i = 1, n do
  out[w + 1] = ok[i] and 1 or 0
  if all then out[w + 2], out[w + 3] = rem1[i], dur(rst1[i])
  else out[w + 2], out[w + 3] = rem0[i], dur(rst0[i]) end
  out[w + 4] = dur(retry[i])
  w = w + 4
  if pre then
    local new = ''
    if save[i][1] == 'SET' then new = save[i][3] end
    out[w + 1], out[w + 2], out[w + 3], out[w + 4] = rem0[i], dur(rst0[i]), old[i], new
    w = w + 4
  end
end
return out
