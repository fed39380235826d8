-- settle.lua: adjust what buckets have been charged (Store.Settle), by a
-- signed amount each: c > 0 charges c more units, c < 0 gives -c back.
-- Nothing is denied: a charge that overdraws a bucket is debt (a token
-- bucket below 0 tokens, a GCRA TAT beyond its tolerance, a window count
-- beyond its limit), which later takes wait out. Every key must be in one
-- cluster slot; the buckets are adjusted in one atomic step.
--
-- KEYS[i]   state key of bucket i, i = 1..n
-- ARGV[1]   now, integer microseconds since the Unix epoch, or "" to read
--           Redis TIME (as take.lua)
-- ARGV[2]   minimum key TTL in milliseconds (at least 1), as take.lua's
-- ARGV[3]   the buckets' limits and adjustments, packed as take.lua packs a
--           take:
--           n ("<d"), then per bucket ("<Bdddd") the algorithm (its id,
--           as the prelude names it), rate N, period P in microseconds,
--           burst B and the signed adjustment c
--
-- Reply: integer, the number of buckets whose state changed.
--
-- With the arithmetic of the quota.Algorithm doc ("Settlement"; the same
-- operations, in the same order, as memstore's Settle), the state read as
-- take.lua reads it:
--   token bucket   tokens = min(B, tokens + (elapsed * N) / P)
--                  tokens = min(B, tokens - c), ts = now
--   GCRA           c > 0: tat = max(tat, t) + c * T; c < 0: tat = max(t,
--                  tat + c * T) (t = now - quota.GCRAEpoch, T = P / N)
--   fixed window   count = max(0, count + c), the current window's
--   sliding window curr = max(0, curr + c), the current window's
--   counter
--   sliding window c > 0: c entries at now (named as take.lua names them);
--   log            c < 0: the -c newest entries removed (at each
--                  timestamp, the highest-numbered first, so take.lua's
--                  numbering stays dense)
-- An absent key (or a state of another layout, which take.lua reads as
-- absent) is a full bucket: a refund leaves it absent, a charge starts it
-- from full. A refund of a window that counts nothing now changes
-- nothing.
--
-- TTLs, as take.lua sets them for the state written (state.lua, which
-- the store prepends to this script, writes string states and a log's
-- entries: logadd, and loggiveback with no upper bound). A log's key
-- gets PEXPIRE of its window when entries are added; removing entries
-- keeps its TTL.

local x = ARGV[3]
local n, pos = sunpack('<d', x)
if n ~= #KEYS or #x ~= 8 + 33 * n then
  error('settle.lua: the limits argument has ' .. #x .. ' bytes for ' .. n .. ' buckets and ' .. #KEYS .. ' keys')
end

-- window returns the index of the window of length W holding now, exact
-- for now < 2^53
local function window(W)
  local w = now / W
  w = w - w % 1
  if w * W > now then w = w - 1 elseif (w + 1) * W <= now then w = w + 1 end
  return w
end

-- unpack has a stack limit: more than 1000 keys are read one by one
local vals
if n <= 1000 then vals = call('MGET', unpack(KEYS)) else vals = {} end

local done = 0
for i = 1, n do
  local alg, N, P, B, c
  alg, N, P, B, c, pos = sunpack('<Bdddd', x, pos)
  local k = KEYS[i]
  local v
  if n <= 1000 then v = vals[i]
  elseif c ~= 0 and alg ~= SLIDING_WINDOW_LOG then
    v = redis.pcall('GET', k) -- another type: absent, as MGET reads it
    if type(v) == 'table' then v = false end
  end
  if c == 0 then
  elseif alg == TOKEN_BUCKET then
    local e0, tokens, _, live = tbnow(v, B, N, P, now)
    if live or c > 0 then
      local t = tokens - c
      if t < B then tokens = t else tokens = B end
      put(k, '<ddddd', e0, tokens, now, B, N / P, ceil(((B - tokens) * P) / N))
      done = done + 1
    end
  elseif alg == GCRA then
    local t = now - EPOCH
    local em = P / N
    local e0, tat, _, _, live = gcraread(v, em, t)
    if live or c > 0 then
      if c > 0 then
        if t > tat then tat = t end
        tat = tat + c * em
      else
        tat = tat + c * em
        if tat < t then tat = t end
      end
      put(k, '<ddd', e0, tat, em, nil, nil, ceil(tat - t))
      done = done + 1
    end
  elseif alg == FIXED_WINDOW then
    local W = P
    local w = window(W)
    local e0, count = fwread(v, w, now)
    if c > 0 or count > 0 then
      count = count + c
      if count < 0 then count = 0 end
      put(k, '<dddd', e0, w, count, (w + 1) * W, nil, (w + 1) * W - now)
      done = done + 1
    end
  elseif alg == SLIDING_WINDOW_COUNTER then
    local W = P
    local w = window(W)
    local e0, curr, prev = swcread(v, w, W, now)
    if c > 0 or curr > 0 then
      curr = curr + c
      if curr < 0 then curr = 0 end
      put(k, '<ddddd', e0, w, curr, prev, W, (w + 2) * W - now)
      done = done + 1
    end
  else -- SLIDING_WINDOW_LOG
    local W = P
    call('ZREMRANGEBYSCORE', k, '-inf', fmt('%.17g', now - W))
    if c > 0 then
      logadd(k, now, c)
      call('PEXPIRE', k, fmt('%d', ttl(W)))
      done = done + 1
    elseif loggiveback(k, '+inf', -c) > 0 then
      done = done + 1
    end
  end
end
return done
