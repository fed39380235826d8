-- carry.lua: how a bucket's state string reads under the limit in force,
-- shared by every script (the store puts it after the prelude). A state
-- records the limit it was written under, so a take under a changed limit
-- (a rule's new rate, burst or window, a tenant's new tier) keeps what its
-- callers consumed, with the arithmetic of the quota.Algorithm doc ("Limit
-- changes"; memstore's carry.go is the same, operation for operation).
-- Until a take writes it under the new limit, a state counts down at the
-- pace of the limit it was written under, so it reads as absent exactly
-- when that limit says, which its TTL follows:
--
--   token bucket            E, tokens, ts, Bw, Rw  40 bytes
--                           refilled at Rw (units per µs) to Bw, then
--                           tokens + (B - Bw); with Bw == B and Rw == N / P
--                           as the Algorithm doc writes it
--   GCRA                    E, tat, Tw             24 bytes
--                           tat = t + ((tat - t) / Tw) * T when Tw ~= T
--                           and tat > t (t = now - EPOCH, T = P / N)
--   fixed window            E, win, count, z       32 bytes
--                           count counts while the window it was counted
--                           in lasts (z, its end, is after now)
--   sliding window counter  E, win, curr, prev, Ww 40 bytes
--                           with Ww == W as before (win == w: curr, prev;
--                           win == w - 1: prev = curr); else, until its
--                           curr's window and the next one are over,
--                           each count goes to the newest window of
--                           length W its own window overlaps (curr's
--                           [win * Ww, (win + 1) * Ww), prev's the one
--                           before), or nowhere
--
-- A state of the length these had before they recorded their limit (24,
-- 16, 24 and 32 bytes) reads as written under the limit in force, as it
-- always did; a string of any other length reads as absent. Each function
-- returns the state's deadline E (0 when absent) first.

local cunpack = struct.unpack

-- tbat returns a token bucket's tokens el µs after a state (tk, written
-- under bw and rw, nil for a state that did not record them) was written,
-- under burst B and rate N / P, and r: 0 when it was written under this
-- limit (its times are then reckoned with N and P, as the Algorithm doc
-- writes them), else the rate it was written under, at which it goes on
-- refilling, to its own burst, its consumption carried to B.
local function tbat(tk, el, B, N, P, bw, rw)
  if not bw or (bw == B and rw == N / P) then
    local t = tk + (el * N) / P
    if t < B then return t, 0 end
    return B, 0
  end
  local t = tk + el * rw
  if t > bw then t = bw end
  return t + (B - bw), rw
end

-- tbnow returns a token bucket's E, its tokens and r at now (tbat;
-- absent: B, 0), whether a state was read, and what a later tbat needs:
-- the state's tokens, µs since it was written, and bw, rw.
local function tbnow(v, B, N, P, now)
  local e0, tk, ts, bw, rw
  if v then
    local n = #v
    if n == 40 then e0, tk, ts, bw, rw = cunpack('<ddddd', v)
    elseif n == 24 then e0, tk, ts = cunpack('<ddd', v) end
  end
  if not e0 then return 0, B, 0, false end
  local el = now - ts
  if el < 0 then el = 0 end
  local t, r = tbat(tk, el, B, N, P, bw, rw)
  return e0, t, r, true, tk, el, bw, rw
end

-- gcraread returns a GCRA bucket's E and tat under emission interval em
-- at t (µs since EPOCH) (absent: t), the tat as stored, tw: 0 when it was
-- written under em, else the interval it was written under, at which its
-- units go on draining (the units it is ahead of t, (tat - t) / tw,
-- counted at em each), and whether a state was read.
local function gcraread(v, em, t)
  local e0, tat, tw
  if v then
    local n = #v
    if n == 24 then e0, tat, tw = cunpack('<ddd', v)
    elseif n == 16 then e0, tat = cunpack('<dd', v) end
  end
  if not e0 then return 0, t, t, 0, false end
  if not tw or tw == em or tat <= t then return e0, tat, tat, 0, true end
  return e0, t + ((tat - t) / tw) * em, tat, tw, true
end

-- fwread returns a fixed window's E, the count that counts at now in the
-- window w (its index, or a calendar window's start), the stored window
-- (nil when absent), and, when the count counts, the end of the window it
-- was counted in (else nil).
local function fwread(v, w, now)
  if v then
    local n = #v
    if n == 32 then
      local e0, sw, sc, z = cunpack('<dddd', v)
      if z > now then return e0, sc, sw, z end
      return e0, 0, sw
    elseif n == 24 then
      local e0, sw, sc = cunpack('<ddd', v)
      if sw == w then return e0, sc, sw end
      return e0, 0, sw
    end
  end
  return 0, 0, nil
end

-- swcread returns a sliding window counter's E, curr and prev at now, in
-- window w of length W, and, for counts carried from a window of another
-- length, when they stop counting (else nil).
local function swcread(v, w, W, now)
  if not v then return 0, 0, 0 end
  local n = #v
  local e0, sw, sc, sp, ww
  if n == 40 then e0, sw, sc, sp, ww = cunpack('<ddddd', v)
  elseif n == 32 then
    e0, sw, sc, sp = cunpack('<dddd', v)
    ww = W
  else return 0, 0, 0 end
  if ww == W then
    if sw == w then return e0, sc, sp
    elseif sw == w - 1 then return e0, 0, sc end
    return e0, 0, 0
  end
  -- window starts in µs: exact, below 2^53
  local ce, ns = (sw + 1) * ww, w * W
  local x = ce + ww
  if now >= x then return e0, 0, 0 end
  local curr, prev = 0, 0
  if ce > ns then curr = sc elseif ce > ns - W then prev = sc end
  ce = ce - ww
  if ce > ns then curr = curr + sp elseif ce > ns - W then prev = prev + sp end
  return e0, curr, prev, x
end
