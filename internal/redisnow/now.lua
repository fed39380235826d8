-- Preamble of floodgate's scripts (package internal/redisnow): defines now,
-- the current time in Unix milliseconds, from ARGV[1], or from Redis TIME
-- when ARGV[1] is "" (so instances with skewed clocks agree).
local now = tonumber(ARGV[1])
if not now then
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
