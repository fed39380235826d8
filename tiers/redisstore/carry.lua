-- carry.lua: how a bucket's state string reads under the limit in force,
-- shared by every script (the store puts it after the prelude). A state
-- records the limit it was written under, so a take under a changed limit
-- (a rule's new rate, burst or window, a tenant's new tier) keeps what its
-- callers consumed, with the arithmetic of the quota.Algorithm doc ("Limit
-- changes"; memstore's carry.go is the same, operation for operation):
--
--   token bucket            E, tokens, ts, Bw, X   40 bytes
--                           absent from X (when it refills to its own
--                           burst at its own rate) on; else tokens =
--                           tokens + (B - Bw) when Bw ~= B
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
-- So a state reads as absent from the moment it would under the limit it
-- was written under, whatever its key's TTL (which is never shorter), and
-- a longer TTL still never changes a decision. A state of the length
-- these had before they recorded their limit (24, 16, 24 and 32 bytes)
-- reads as written under the limit in force, as it always did; a string
-- of any other length reads as absent. Each function returns the state's
-- deadline E (0 when absent) first.

local cunpack = struct.unpack

-- tbread returns a token bucket's E, tokens and ts under burst B at now,
-- and whether a state was read (absent: E, B, now, false).
local function tbread(v, B, now)
  if v then
    local n = #v
    if n == 40 then
      local e0, tk, ts, bw, x = cunpack('<ddddd', v)
      if now >= x then return e0, B, now, false end
      if bw ~= B then tk = tk + (B - bw) end
      return e0, tk, ts, true
    elseif n == 24 then
      local e0, tk, ts = cunpack('<ddd', v)
      return e0, tk, ts, true
    end
  end
  return 0, B, now, false
end

-- gcraread returns a GCRA bucket's E and tat under emission interval em
-- at t (µs since EPOCH), and whether a state was read (absent: 0, t,
-- false).
local function gcraread(v, em, t)
  if v then
    local n = #v
    if n == 24 then
      local e0, tat, tw = cunpack('<ddd', v)
      if tw ~= em and tat > t then tat = t + ((tat - t) / tw) * em end
      return e0, tat, true
    elseif n == 16 then
      local e0, tat = cunpack('<dd', v)
      return e0, tat, true
    end
  end
  return 0, t, false
end

-- fwread returns a fixed window's E, the count that counts at now in the
-- window w (its index, or a calendar window's start), and the stored
-- window (nil when absent).
local function fwread(v, w, now)
  if v then
    local n = #v
    if n == 32 then
      local e0, sw, sc, z = cunpack('<dddd', v)
      if z > now then return e0, sc, sw end
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
-- window w of length W.
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
  if now >= ce + ww then return e0, 0, 0 end
  local curr, prev = 0, 0
  if ce > ns then curr = sc elseif ce > ns - W then prev = sc end
  ce = ce - ww
  if ce > ns then curr = curr + sp elseif ce > ns - W then prev = prev + sp end
  return e0, curr, prev
end
