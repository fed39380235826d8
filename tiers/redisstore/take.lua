-- take.lua: charge every bucket of a take its cost if and only if every
-- bucket of that take allows it (all or nothing), with the arithmetic of
-- the quota.Algorithm doc. One call may carry several takes (client-side
-- batching): they are decided one after another, each seeing what the
-- ones before it charged, exactly as if each were its own call.
--
-- KEYS[i]   state key of bucket i, i = 1..n, the buckets of every take in
--           order (all in one cluster slot); a key may recur in different
--           takes, never within one
-- ARGV[1]   now, integer microseconds since the Unix epoch, or "" to read
--           Redis TIME
-- ARGV[2]   mode: "t" take; "p" take and also report each bucket's
--           remaining and reset before the charge, and its state before
--           and after (multi-slot cluster takes, which may have to refund)
-- ARGV[3]   minimum key TTL in milliseconds (at least 1)
-- ARGV[4]   T, the number of takes (at least 1; a take with a sliding
--           window log bucket must come alone, T = 1)
-- ARGV[4+j] take j's buckets' limits and costs, j = 1..T, packed with
--           struct: its number of buckets m ("<d"), then per bucket
--           ("<Bdddd", a byte and little-endian doubles) the algorithm
--           (its id in package quota: TOKEN_BUCKET, GCRA,
--           SLIDING_WINDOW_COUNTER, SLIDING_WINDOW_LOG, FIXED_WINDOW, which
--           the store's generated prelude defines), rate N, period P in
--           microseconds, burst B and cost c; a bucket that may wait (token
--           bucket and GCRA, quota.Bucket.MaxWait) has WAITS added to its
--           algorithm and
--           one more double ("<d"), its longest wait in microseconds; a
--           bucket with a partial grant (quota.Bucket.AtMost) has AT_MOST
--           added, its cost then the most to charge; a calendar fixed
--           window (quota.Bucket.Span) has SPAN added and two more doubles,
--           the window's start and end in microseconds. One
--           argument per take, not five per
--           bucket: every argument costs Redis a parse, an object and a
--           Lua string, and takes of the same rules and costs repeat it,
--           so each distinct one is unpacked once per call.
--
-- Reply: array of integers
--   [1] now used, in microseconds
--   then per take: 1 if every bucket allowed and all were charged (2 if
--   the take has a bucket that may wait; -g if it has a partial-grant
--   bucket and charged them g units, g >= 1), else 0,
--   then per bucket of a take that charged: remaining and reset in
--   microseconds, and with flag 2 its wait in microseconds (every bucket
--   allowed, retry-after 0); of a take that
--   denied: allowed (1/0), remaining, reset and retry-after in
--   microseconds (0 when allowed, -1 = never). Redis spends about as much
--   on each integer of a reply as on a Lua table store, so a charged take,
--   the common case, reports only what it must.
-- Mode "p" (multi-slot cluster takes, which may have to refund) reports,
-- per take, its flag, then always 6 integers per bucket: allowed, remaining, reset,
-- retry-after (for an allowed bucket: its wait), then remaining and reset
-- before any charge; then per bucket the key's raw state before the take
-- and the state the take wrote (none when the key was absent, the take
-- did not charge or the algorithm is the sliding window log), each as its
-- length in 32-bit words and the words as integers, so that the whole
-- reply is integers.
--
-- Writes: every decision is made before the first write, and the writes
-- (one write per string-state key, however many takes charged it; the log's
-- ZADD and PEXPIRE) come last. Redis refuses a script's write for lack of
-- memory only at its first write, so a call that fails has charged
-- nothing (the log's ZREMRANGEBYSCORE, run while deciding, only drops
-- entries that no longer count), and its takes can be sent again.
--
-- State per key: a string of the state's numbers as little-endian IEEE
-- doubles (struct.pack "<d..."), exact, and in Redis's Lua several times
-- cheaper to read and write than text (tonumber and string.format cost
-- about half a microsecond each); a string of any other length (a state
-- written by another version, or garbage) reads as absent. The first
-- number is the key's deadline (below), then the algorithm's, the last
-- of them the limit the state was written under (carry.lua says how a
-- state reads under another limit, and under none: one written before
-- states recorded their limit):
--   token bucket            E, tokens, ts, B, N / P  40 bytes
--   GCRA                    E, tat (µs since quota.GCRAEpoch), T  24 bytes
--   sliding window counter  E, win, curr, prev, W  40 bytes
--   fixed window            E, win, count, z (the window's end, µs)  32 bytes
--   sliding window log      sorted set: one member per admitted unit,
--                           score = its timestamp, member "ts:k" with k
--                           counting 1.. the units sharing that timestamp
--
-- TTLs. A state needs its key for tu µs (the Algorithm doc's TTL), and at
-- least the minimum TTL. With Redis time, E is the deadline (ms since the
-- Unix epoch, Redis's clock) the key's TTL was last set to: a write whose
-- need E still covers keeps the TTL (SETRANGE or SET KEEPTTL, which cost
-- Redis about a third less than setting one), else E moves to the need plus the
-- minimum TTL and is set (PXAT), so a busy key sets its TTL about once per
-- minimum TTL. Redis expires keys on the same clock, and E only ever
-- grows, so the key's real TTL is never shorter than E says. With a fixed
-- time (tests on a fake clock) E is 0 and every write sets PX, the need
-- rounded up (above 100 ms to 100 ms, above 1 s to whole seconds, so a
-- call formats few distinct ones); logs always PEXPIRE so. A longer TTL
-- never changes a decision: a key is due to expire only once its state
-- reads the same as no state at all.
--
-- This script runs on every decision and Redis CPU is the throughput
-- limit, so it is written for cost (each Lua call of a C function, such as
-- math.floor, costs Redis hundreds of instructions: floor(x) is written
-- x - x % 1 and ceil(x) likewise where x >= 0, where both are exact, the
-- % being done in C by the VM itself): one pass over the buckets, no table
-- per bucket, the reply filled with the charged values (overwritten with
-- the uncharged ones if the take denies), math.min/max and the TTL and
-- duration clamps inlined (in the same comparison order, so NaN and ties
-- behave as before), all string states read by one MGET, each distinct
-- take's limits unpacked once, each distinct TTL formatted once, and a state built
-- only when it can be written or must be reported.

local call, pcall = redis.call, redis.pcall
local tonumber, fmt = tonumber, string.format
local pack, sunpack = struct.pack, struct.unpack
local ceil = math.ceil
local ARGV, KEYS = ARGV, KEYS

local now
if ARGV[1] == '' then
  local t = call('TIME')
  now = tonumber(t[1]) * 1000000 + tonumber(t[2])
else
  now = tonumber(ARGV[1])
end
local pre = ARGV[2] == 'p'
-- with Redis time, a state carries the deadline (ms since the Unix epoch)
-- its key's TTL was set to, so that a write it still covers keeps the TTL
local rtime = ARGV[1] == ''
local nowms = (now - now % 1000) / 1000
-- GCRA works in µs since EPOCH (quota.GCRAEpoch, 2026-01-01T00:00:00Z),
-- with the tolerance SLACK (quota.GCRASlack); the prelude defines both.
local minttl = tonumber(ARGV[3])
local T = tonumber(ARGV[4])

-- TTLs (ceil(µs / 1000) ms, at least minttl) are capped at 1e13 ms (317
-- years, beyond any time.Duration): a larger one would reach Redis in
-- exponent form and fail the take
local MAXTTL = 1e13

-- durations in the reply are capped at 2^62 µs, an exact double above the
-- largest time.Duration (about 9.2e15 µs), which the Go side saturates;
-- a double of 2^63 or more has no Redis integer
local MAXUS = 2 ^ 62

-- takes' limits unpacked so far, by their argument: {m, then per bucket
-- q alg, N, P, B, c, longest wait (-1: none) at 6q-4 .. 6q+1}; the takes
-- with a bucket that may wait (hasw); and TTLs formatted so far, by value
-- takes with a partial-grant bucket (part[x][q] = true: AT_MOST on its
-- algorithm) and with a calendar window (spn[x][2q-1], spn[x][2q]: its
-- start and end in µs, SPAN on its algorithm, two more doubles after the
-- longest wait)
-- (all but lims made at their first entry: most calls need none of them,
-- and every table a call makes is garbage Redis's Lua collects)
local lims, hasw, tstr, part, spn = {}, nil, nil, nil, nil
local function limits(x)
  local m, pos = sunpack('<d', x)
  local TL
  if m <= 4 then
    TL = {m, nil, nil, nil, nil, nil, nil, nil, nil, nil, nil, nil, nil, nil, nil, nil, nil, nil, nil, nil, nil, nil, nil, nil, nil}
  else TL = {m} end
  for q = 1, m do
    local a, N, P, B, c, mw
    a, N, P, B, c, pos = sunpack('<Bdddd', x, pos)
    if a >= WAITS then
      a = a - WAITS
      mw, pos = sunpack('<d', x, pos)
      if hasw then hasw[x] = true else hasw = {[x] = true} end
    else mw = -1 end
    if a >= AT_MOST then
      a = a - AT_MOST
      if not part then part = {} end
      local pt = part[x]
      if not pt then pt = {}; part[x] = pt end
      pt[q] = true
    end
    if a >= SPAN then
      a = a - SPAN
      if not spn then spn = {} end
      local sp = spn[x]
      if not sp then sp = {}; spn[x] = sp end
      sp[2 * q - 1], sp[2 * q], pos = sunpack('<dd', x, pos)
    end
    local b = 6 * q - 4
    TL[b], TL[b + 1], TL[b + 2], TL[b + 3], TL[b + 4], TL[b + 5] = a, N, P, B, c, mw
  end
  if pos ~= #x + 1 then error('take.lua: a take\'s limits argument has ' .. #x .. ' bytes for ' .. m .. ' buckets') end
  lims[x] = TL
  return TL
end
local function ttext(ms)
  if not tstr then tstr = {} end
  local t = tstr[ms]
  if not t then t = fmt('%d', ms); tstr[ms] = t end
  return t
end

local n = #KEYS
-- per bucket q of the current take: remaining and reset before the
-- charge, and retry-after if it denied, else false (u0[3q-2..3q]; reused
-- by every take); per bucket i: the state to SET (st[i], false: log),
-- its TTL in ms (tm[i]) and, with Redis time, its new deadline (te[i],
-- false when the key's deadline covers it); in mode "p" also its values after the
-- charge (u1[4i-3..4i]: allowed, remaining, reset, retry-after), before
-- it (z0[2i-1..2i]: remaining, reset), and its state before and the state
-- written (sb[i], sa[i]; false: none).
-- A Lua table grows by rehashing, which costs Redis more than the stores
-- themselves: the reply and the per-bucket tables start at their size
-- (a table built from unpack(KEYS) has n slots), to be overwritten.
-- (A table constructor with nil items has that many slots and no values.)
local u0 = {nil, nil, nil, nil, nil, nil, nil, nil, nil, nil, nil, nil}
local u1, sb, sa, z0, pf
if pre then u1, sb, sa, z0, pf = {}, {}, {}, {}, {} end
-- A TTL in tm is a log's or a fixed time's, a deadline in te Redis
-- time's: only one of the two is made at the call's size.
local out, st, tm, te, wk
if n <= 4 then -- up to 1 + 1 + 4n in the reply
  out = {now, nil, nil, nil, nil, nil, nil, nil, nil, nil, nil, nil, nil, nil, nil, nil, nil, nil}
  st, wk = {nil, nil, nil, nil}, {nil, nil, nil, nil}
  if rtime then te = {nil, nil, nil, nil} else tm = {nil, nil, nil, nil} end
elseif n <= 1000 then
  out, st, wk = {now, unpack(KEYS)}, {unpack(KEYS)}, {unpack(KEYS)}
  if rtime then te = {unpack(KEYS)} else tm = {unpack(KEYS)} end
else out, st, wk = {now}, {}, {} end
tm, te = tm or {}, te or {}
local on = 1 -- out[1..on] is the reply so far; it never ends below n + 1
-- every state string in one MGET (a log's sorted set reads as nil; a
-- string-state key holding another type reads as absent rather than
-- failing the take, and is then overwritten); unpack has a stack limit,
-- so a call of more than 1000 buckets reads them one by one
-- (NODE: run as nodeScript, the keys of several slots of one cluster
-- master; node_read, its head's, reads them by one MGET per take)
local vals
if NODE then vals = node_read(KEYS, T)
elseif n <= 1000 then vals = call('MGET', unpack(KEYS))
else
  vals = {}
  local i = 0
  for j = 1, T do
    local TL = lims[ARGV[4 + j]] or limits(ARGV[4 + j])
    for q = 1, TL[1] do
      i = i + 1
      if TL[6 * q - 4] == SLIDING_WINDOW_LOG then vals[i] = false
      else
        local v = pcall('GET', KEYS[i]) -- another type: absent, as MGET reads it
        if type(v) == 'table' then v = false end
        vals[i] = v
      end
    end
  end
end
-- what the takes charged so far: key -> the bucket that last charged it
-- (T > 1 only: one take never names a key twice), the buckets to write
-- (wk[1..wn], each key's first charge), and the logs to record with their
-- costs (lc)
local cur, wn, logs, lc = T > 1 and {}, 0, nil, nil

local i = 0 -- the bucket, counted over every take
for j = 1, T do
  local ls = ARGV[4 + j]
  local TL = lims[ls] or limits(ls)
  local first = i + 1
  local last = i + TL[1]
  local all = true
  local tw = hasw and hasw[ls] -- the take has a bucket that may wait
  local pt, sp = part and part[ls], spn and spn[ls] -- its partial-grant and calendar buckets
  -- a partial grant: every AT_MOST bucket costs g, the least of its cost
  -- and their remainings, at least 1 (a cost of 0 stays 0)
  local g
  if pt then
    -- avail is a bucket's remaining as it stands (state v, key k; ss: a
    -- fixed window's calendar start), for a partial grant: the arithmetic of
    -- rem0 in the bucket loop below, written the same way. It is built
    -- here, by the takes that need it: a closure of this many upvalues
    -- costs Redis about 7 000 instructions, which every call paid (5 % of
    -- a one-take call) when it was built with the other helpers.
    local function avail(alg, N, P, B, v, k, ss)
      local x
      if alg == TOKEN_BUCKET then
        local _
        _, x = tbnow(v, B, N, P, now)
      elseif alg == GCRA then
        local em = P / N
        local BT = B * em
        local sl = SLACK
        if em / 2 < sl then sl = em / 2 end
        local tol = BT + sl
        local t = now - EPOCH
        local _, tat = gcraread(v, em, t)
        if t > tat then tat = t end
        x = (tol - (tat - t)) / em
      elseif alg == SLIDING_WINDOW_COUNTER then
        local W, L = P, N
        local w = now / W
        w = w - w % 1
        if w * W > now then w = w - 1 elseif (w + 1) * W <= now then w = w + 1 end
        local e = now - w * W
        local _, curr, prev = swcread(v, w, W, now)
        x = L - ((prev * (W - e)) / W + curr)
      elseif alg == SLIDING_WINDOW_LOG then
        call('ZREMRANGEBYSCORE', k, '-inf', fmt('%.17g', now - P))
        x = N - call('ZCARD', k)
      else -- FIXED_WINDOW
        local w, s = ss, ss
        if not w then
          w = now / P
          w = w - w % 1
          if w * P > now then w = w - 1 elseif (w + 1) * P <= now then w = w + 1 end
          s = w * P
        end
        local _, count = fwread(v, w, now)
        x = N - count
      end
      if x > 0 then return x - x % 1 end
      return 0
    end
    for i = first, last do
      local q = i - first + 1
      if pt[q] then
        local b = 6 * q - 4
        local v = vals[i]
        if T > 1 then local ci = cur[KEYS[i]]; if ci then v = st[ci] end end
        local r = avail(TL[b], TL[b + 1], TL[b + 2], TL[b + 3], v, KEYS[i], sp and sp[2 * q - 1])
        local c = TL[b + 4]
        if r > c then r = c end
        if not g or r < g then g = r end
        if c == 0 then g = 0 elseif g < 1 then g = 1 end
      end
    end
  end
  on = on + 1
  local oc = on -- this take's charged flag
  for i = first, last do
    local b = 6 * (i - first) + 2
    local alg, N, P, B, c, mw = TL[b], TL[b + 1], TL[b + 2], TL[b + 3], TL[b + 4], TL[b + 5]
    if pt and pt[i - first + 1] then c = g end
    local k = KEYS[i]
    -- allowed, retry, remaining and reset before (0) and after (1) the
    -- charge, state before, state to write and its TTL in µs, and the
    -- wait of a bucket that allows by booking units ahead
    local allow, ra, rem0, rst0, rem1, rst1, v, s, tu
    local wt = 0
    -- the state's deadline as read (0: none), and the state to build: its
    -- struct layout (nil: none to build) and numbers after the deadline
    local e0, sf, x1, x2, x3, x4 = 0
    -- the state as it stands: as read, or as an earlier take of this call
    -- charged it (a log's sorted set reads as nil, and no log is merged)
    v = vals[i]
    if T > 1 then local ci = cur[k]; if ci then v = st[ci] end end

    if alg == TOKEN_BUCKET then
      -- r: 0 under the limit the state was written under, else the
      -- rate it goes on refilling at (carry.lua)
      -- tbnow, inlined for the common case (the state written under
      -- the limit in force, or absent): a Lua call costs Redis more than
      -- the arithmetic
      local tokens, r, live, tk, el, bw, rw, ts = B, 0, false
      if v then
        local vn = #v
        if vn == 40 then e0, tk, ts, bw, rw = sunpack('<ddddd', v); live = true
        elseif vn == 24 then e0, tk, ts = sunpack('<ddd', v); live = true end
      end
      if live then
        el = now - ts
        if el < 0 then el = 0 end
        if not bw or (bw == B and rw == N / P) then
          local t = tk + (el * N) / P
          if t < B then tokens = t else tokens = B end
        else tokens, r = tbat(tk, el, B, N, P, bw, rw) end
      end
      allow = c <= tokens
      local t1 = tokens - c
      local x -- >= 0: tokens <= B
      if r == 0 then x = ((B - tokens) * P) / N else x = (B - tokens) / r end
      local f = x % 1
      if f == 0 then rst0 = x else rst0 = x - f + 1 end
      -- remaining: floor, and below 0 (a settlement's debt, units booked
      -- ahead) 0
      if tokens > 0 then rem0 = tokens - tokens % 1 else rem0 = 0 end
      if t1 > 0 then rem1 = t1 - t1 % 1 else rem1 = 0 end
      x = ((B - t1) * P) / N -- >= 0: t1 <= tokens
      f = x % 1
      if f == 0 then rst1 = x else rst1 = x - f + 1 end
      if allow then ra = 0
      elseif c > B then ra = -1
      else
        if r == 0 then ra = ceil(((c - tokens) * P) / N) else ra = ceil((c - tokens) / r) end
        -- one µs more when a read then would find the tokens short of c
        -- by the rounding's last bit (a denying bucket has a state)
        if live and tbat(tk, el + ra, B, N, P, bw, rw) < c then ra = ra + 1 end
      end
      if ra > 0 and ra <= mw then allow, wt, ra = true, ra, 0 end
      if all and allow and c > 0 then sf, x1, x2, x3, x4 = '<ddddd', t1, now, B, N / P end
      tu = rst1

    elseif alg == GCRA then
      local em = P / N -- emission interval
      local BT = B * em
      local sl = SLACK -- at most half an emission interval
      if em / 2 < sl then sl = em / 2 end
      local tol = BT + sl
      local t = now - EPOCH
      -- tw: 0 under the interval the state was written under, else the
      -- interval its units go on draining at, until tat (carry.lua)
      local tat, stored, tw
      e0, tat, stored, tw = gcraread(v, em, t)
      local tat0 = tat
      if t > tat0 then tat0 = t end
      local tat1 = tat0 + c * em
      allow = tat1 - t <= tol
      -- remaining: floor, and below 0 (where x % 1 is not exact) 0
      local x = (tol - (tat0 - t)) / em
      if x > 0 then rem0 = x - x % 1 else rem0 = 0 end
      x = (tol - (tat1 - t)) / em
      if x > 0 then rem1 = x - x % 1 else rem1 = 0 end
      if tw == 0 then x = tat0 - t else x = stored - t end -- >= 0
      local f = x % 1
      if f == 0 then rst0 = x else rst0 = x - f + 1 end
      x = tat1 - t -- >= 0
      f = x % 1
      if f == 0 then rst1 = x else rst1 = x - f + 1 end
      if allow then ra = 0 elseif c > B then ra = -1
      elseif tw == 0 then ra = ceil(tat1 - t - BT - sl)
      else ra = ceil((stored - t) - ((tol - c * em) * tw) / em) end
      if ra > 0 and ra <= mw then allow, wt, ra = true, ra, 0 end
      if all and allow and c > 0 then sf, x1, x2 = '<ddd', tat1, em end
      tu = rst1

    elseif alg == SLIDING_WINDOW_COUNTER then
      local W, L = P, N
      -- window index of now, exact for now < 2^53
      local w = now / W
      w = w - w % 1
      if w * W > now then w = w - 1 elseif (w + 1) * W <= now then w = w + 1 end
      local e = now - w * W
      -- xe: when counts carried from a window of another length stop
      -- counting (carry.lua), which caps reset and retry-after
      local curr, prev, xe
      e0, curr, prev, xe = swcread(v, w, W, now)
      local weighted = (prev * (W - e)) / W + curr
      allow = weighted + c <= L
      -- remaining: floor, and below 0 (where x % 1 is not exact) 0
      local x = L - weighted
      if x > 0 then rem0 = x - x % 1 else rem0 = 0 end
      x = L - weighted - c
      if x > 0 then rem1 = x - x % 1 else rem1 = 0 end
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
      if xe then
        if rst0 > xe - now then rst0 = xe - now end
        if ra > xe - now then ra = xe - now end
      end
      if all and allow and c > 0 then
        sf, x1, x2, x3, x4 = '<ddddd', w, curr + c, prev, W
      end
      tu = (w + 2) * W - now

    elseif alg == SLIDING_WINDOW_LOG then
      -- its entries are written at the end, so a later take of the same call
      -- could not see them
      if T > 1 then return redis.error_reply('take.lua: a take with a sliding window log bucket must be the only take of its call') end
      local W, L = P, N
      call('ZREMRANGEBYSCORE', k, '-inf', fmt('%.17g', now - W))
      local cnt = call('ZCARD', k)
      -- the log lasts a window (the one in force) beyond any take that
      -- finds it: a longer window than it was charged under keeps it
      if cnt > 0 then
        local lm = ceil(W / 1000)
        if lm < minttl then lm = minttl end
        call('PEXPIRE', k, fmt('%d', lm), 'GT')
      end
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

    else -- FIXED_WINDOW
      local W, L = P, N
      -- window index of now, exact for now < 2^53, or a calendar window's
      -- start; r: the time to the window's end (a calendar window's: at
      -- least 1)
      local w, r, z, ws
      local q = 2 * (i - first) + 1
      if sp and sp[q] then
        w, z = sp[q], sp[q + 1]
        ws, r = w, z - now
        if r < 1 then r = 1 end
      else
        w = now / W
        w = w - w % 1
        if w * W > now then w = w - 1 elseif (w + 1) * W <= now then w = w + 1 end
        ws, z = w * W, (w + 1) * W
        r = z - now
      end
      -- zc: the end of the window a counting count was counted in,
      -- which may be another length's (carry.lua): the count lasts as
      -- long as that window
      local count, zc, _
      e0, count, _, zc = fwread(v, w, now)
      local r0 = r
      if count > 0 and zc then r0 = zc - now end
      allow = count + c <= L
      rem0 = L - count
      if rem0 < 0 then rem0 = 0 end
      rem1 = L - count - c
      if rem1 < 0 then rem1 = 0 end
      rst0, rst1 = r0, r
      if allow then ra = 0 elseif c > L then ra = -1 else ra = r0 end
      if all and allow and c > 0 then sf, x1, x2, x3 = '<dddd', w, count + c, z end
      tu = r
    end

    if rst1 > MAXUS then rst1 = MAXUS end
    if ra > MAXUS then ra = MAXUS end
    local q = 3 * (i - first + 1)
    if allow then u0[q] = false else all = false; u0[q] = ra end
    -- the state to build, with its deadline, and the TTL in ms: with Redis
    -- time, the deadline is kept while it covers now + max(tu, minttl),
    -- else moved min TTL beyond that (whole ms); with a fixed time, or for
    -- a log to charge, ms = ceil(tu / 1000), at least minttl, rounded up
    local ms, E
    if rtime and sf then
      local d = tu / 1000
      if d < minttl then d = minttl end
      if d > MAXTTL then d = MAXTTL end
      d = nowms + d
      if e0 >= d then E = e0
      else
        E = d + minttl
        local f = E % 1
        if f ~= 0 then E = E - f + 1 end
      end
      s = pack(sf, E, x1, x2, x3, x4)
    elseif sf or all then
      ms = tu / 1000 -- >= 0
      local f = ms % 1
      if f ~= 0 then ms = ms - f + 1 end
      if ms < minttl then ms = minttl end
      if ms > 1000 then ms = ms / 1000; f = ms % 1; if f ~= 0 then ms = ms - f + 1 end; ms = ms * 1000
      elseif ms > 100 then ms = ms / 100; f = ms % 1; if f ~= 0 then ms = ms - f + 1 end; ms = ms * 100 end
      if ms > MAXTTL then ms = MAXTTL end
      if sf then s = pack(sf, 0, x1, x2, x3, x4) end
    end
    -- the values after the charge, as a charged take reports them; a take
    -- that denies overwrites them
    out[on + 1], out[on + 2] = rem1, rst1
    on = on + 2
    if tw then out[on + 1] = wt; on = on + 1 end
    if pre then
      local b = 4 * i
      u1[b - 3], u1[b - 2], u1[b - 1] = allow and 1 or 0, rem1, rst1
      if allow then u1[b] = wt else u1[b] = ra end
      z0[2 * i - 1], z0[2 * i] = rem0, rst0
      sb[i], sa[i] = v or false, s or false
    end
    u0[q - 2], u0[q - 1] = rem0, rst0
    if all then
      -- what to write: the state, its TTL in ms, and with Redis time its
      -- deadline if that moved (else false: the key's TTL covers it)
      st[i], tm[i] = s, ms
      if rtime and s then te[i] = E ~= e0 and E end
    end
  end

  if all then -- charge: the states become what later takes see
    if tw then out[oc] = 2 elseif pt and g > 0 then out[oc] = -g else out[oc] = 1 end
    for i = first, last do
      if not st[i] then
        if logs then logs[#logs + 1] = i else logs, lc = {i}, {} end
        if pt and pt[i - first + 1] then lc[i] = g else lc[i] = TL[6 * (i - first) + 6] end
      elseif T == 1 then wn = wn + 1; wk[wn] = i
      else
        local k = KEYS[i]
        local p = cur[k]
        if not p then wn = wn + 1; wk[wn] = i
        -- this charge keeps the deadline an earlier take of this call
        -- moved, which Redis has not seen yet: the write must still set it
        elseif rtime and not te[i] then te[i] = te[p] end
        cur[k] = i
      end
    end
  else -- deny: report allowed, remaining and reset before the charge,
    -- and retry-after, for every bucket (4 values each, so they overwrite
    -- all of the 2 or 3 each written above)
    out[oc] = 0
    on = oc
    for i = first, last do
      local q = 3 * (i - first + 1)
      local r0 = u0[q - 1]
      if r0 == false then
        local newest = call('ZRANGE', KEYS[i], -1, -1, 'WITHSCORES')
        r0 = tonumber(newest[2]) + TL[6 * (i - first) + 4] - now
      end
      if r0 > MAXUS then r0 = MAXUS end
      local ra = u0[q]
      if ra then out[on + 1], out[on + 4] = 0, ra
      else out[on + 1], out[on + 4] = 1, 0 end
      out[on + 2], out[on + 3] = u0[q - 2], r0
      on = on + 4
      if pre then
        local b = 4 * i
        u1[b - 2], u1[b - 1] = u0[q - 2], r0
      end
    end
  end
  if pre then pf[j] = out[oc] end
  i = last
end

-- The writes, by what Redis hands Lua back (a status reply costs Lua a
-- table, more than an integer or nil; an old state of 32 or 40 bytes, a
-- string, costs more than the status reply):
--   - the TTL kept (with Redis time, the key's deadline covers the state:
--     most writes of a busy key; setting a TTL costs Redis about half as
--     much again as the SET): SETRANGE at 0 when the key holds a string
--     of the state's length (a state read live), which leaves the TTL and
--     overwrites the whole value, an integer reply (3 % of a batched take
--     of 4 token buckets in instructions, against SET KEEPTTL); a string
--     of another length (an older layout) is replaced by SET KEEPTTL, so
--     nothing of it is left past the new state's end;
--   - a new deadline (PXAT, min TTL beyond what the state needs) on a key
--     that read as absent: SET ... GET, whose reply is nil (0.7 % of a
--     take of grpcload's zipf traffic); a key holding another type (not
--     written by this script, read as absent) refuses GET, and is then
--     replaced by plain SET, as any type is;
--   - a new deadline on a key read live: plain SET ... PXAT;
--   - a fixed time (tests on a fake clock): SET ... PX the TTL.
-- A refusal comes at the first write (memory), before anything was
-- written, and fails the call as redis.call would.
for w = 1, wn do
  local i = wk[w]
  local k = KEYS[i]
  if T > 1 then i = cur[k] end
  local r
  local E, s = te[i], st[i]
  local v0 = vals[wk[w]] -- the key as read (each key's first charge)
  if not rtime then r = pcall('SET', k, s, 'PX', ttext(tm[i]))
  elseif E then
    E = fmt('%d', E)
    if v0 then r = pcall('SET', k, s, 'PXAT', E)
    else
      r = pcall('SET', k, s, 'PXAT', E, 'GET')
      if type(r) == 'table' and r.err and r.err:sub(1, 9) == 'WRONGTYPE' then r = pcall('SET', k, s, 'PXAT', E) end
    end
  elseif v0 and #v0 == #s then r = pcall('SETRANGE', k, '0', s)
  else r = pcall('SET', k, s, 'KEEPTTL') end
  if type(r) == 'table' and r.err then return r end
end
if logs then
  for _, i in ipairs(logs) do -- record c entries at now, named now:(have+1..have+c)
    local c = lc[i]
    if c > 0 then
      local k = KEYS[i]
      logadd(k, now, c)
      call('PEXPIRE', k, ttext(tm[i]))
    end
  end
end
if not pre then return out end
-- mode "p": now, then per take its charged flag, per bucket allowed,
-- remaining, reset, retry-after, remaining and reset before the charge,
-- then per bucket the state before and the state written, each as its
-- length in 32-bit words (0: none) and its words, little-endian, as
-- integers: a reply of integers only, which a client reads without boxing
-- a value per integer (a state is 4, 6, 8 or 10 words; any other string was
-- read as no state)
local wl = {[16] = '<I4I4I4I4', [24] = '<I4I4I4I4I4I4', [32] = '<I4I4I4I4I4I4I4I4', [40] = '<I4I4I4I4I4I4I4I4I4I4'}
local r, o = {now}, 1
local function words(v)
  local f = v and wl[#v]
  if not f then r[o + 1] = 0; o = o + 1; return end
  local k = #v / 4
  r[o + 1] = k
  if k == 4 then r[o + 2], r[o + 3], r[o + 4], r[o + 5] = sunpack(f, v)
  elseif k == 6 then r[o + 2], r[o + 3], r[o + 4], r[o + 5], r[o + 6], r[o + 7] = sunpack(f, v)
  elseif k == 8 then r[o + 2], r[o + 3], r[o + 4], r[o + 5], r[o + 6], r[o + 7], r[o + 8], r[o + 9] = sunpack(f, v)
  else r[o + 2], r[o + 3], r[o + 4], r[o + 5], r[o + 6], r[o + 7], r[o + 8], r[o + 9], r[o + 10], r[o + 11] = sunpack(f, v) end
  o = o + 1 + k
end
i = 0
for j = 1, T do
  local m = lims[ARGV[4 + j]][1]
  o = o + 1
  r[o] = pf[j]
  for q = i + 1, i + m do
    local b = 4 * q
    local r0 = z0[2 * q]
    if r0 > MAXUS then r0 = MAXUS end
    r[o + 1], r[o + 2], r[o + 3], r[o + 4], r[o + 5], r[o + 6] = u1[b - 3], u1[b - 2], u1[b - 1], u1[b], z0[2 * q - 1], r0
    o = o + 6
  end
  for q = i + 1, i + m do words(sb[q]); words(sa[q]) end
  i = i + m
end
return r
