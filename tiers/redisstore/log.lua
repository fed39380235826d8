-- log.lua: the adding and removing of a sliding window log's entries,
-- which take.lua, settle.lua and report.lua share (the store puts it
-- before each, after the generated prelude and any head).

local logcall, logfmt = redis.call, string.format

-- logadd records u entries at time ts (µs) in the sliding window log k,
-- named ts:(have+1..have+u) after the have entries already at ts, in
-- ZADDs of at most 1000 entries.
local function logadd(k, ts, u)
  local t = logfmt('%.17g', ts)
  local have = logcall('ZCOUNT', k, t, t)
  local j = 1
  while j <= u do
    local args = {}
    local m = 0
    while j <= u and m < 1000 do
      args[m * 2 + 1] = t
      args[m * 2 + 2] = t .. ':' .. logfmt('%.17g', have + j)
      m = m + 1
      j = j + 1
    end
    logcall('ZADD', k, unpack(args))
  end
end

-- loggiveback removes up to n entries scored at or below top (a score
-- bound as Redis reads one: string.format('%.17g', ts), or '+inf' for no
-- bound) from
-- the sliding window log k, the newest timestamp first, at each the
-- highest-numbered entry first (so take.lua's numbering stays dense); it
-- returns how many it removed.
local function loggiveback(k, top, n)
  local left = n
  while left > 0 do
    local r = logcall('ZREVRANGEBYSCORE', k, top, '-inf', 'WITHSCORES', 'LIMIT', 0, 1)
    if #r == 0 then break end
    local ms = logcall('ZRANGEBYSCORE', k, r[2], r[2])
    local idx, byIdx = {}, {}
    for j = 1, #ms do
      local p = string.find(ms[j], ':', 1, true)
      local num = tonumber(string.sub(ms[j], p + 1))
      idx[j] = num
      byIdx[num] = ms[j]
    end
    table.sort(idx)
    local j = #idx
    while j >= 1 and left > 0 do
      logcall('ZREM', k, byIdx[idx[j]])
      j = j - 1
      left = left - 1
    end
    top = '(' .. r[2]
  end
  return n - left
end
