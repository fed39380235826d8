-- A plain hierarchical token bucket: the baseline a user could write by hand.
-- KEYS: the buckets (any number), one hash each {t = tokens, ts = µs}.
-- ARGV[1]: cost; then for bucket i: ARGV[2i] rate per second,
--          ARGV[2i+1] burst.
-- Reply: 1 when every bucket had cost tokens (all charged), else 0 (none).
local now = redis.call('TIME')
now = tonumber(now[1]) * 1000000 + tonumber(now[2])
local cost = tonumber(ARGV[1])
local tokens = {}
for i = 1, #KEYS do
  local rate = tonumber(ARGV[2 * i])
  local burst = tonumber(ARGV[2 * i + 1])
  local s = redis.call('HMGET', KEYS[i], 't', 'ts')
  local t = tonumber(s[1]) or burst
  local ts = tonumber(s[2]) or now
  local elapsed = math.max(0, now - ts)
  t = math.min(burst, t + elapsed * rate / 1000000)
  if t < cost then
    return 0
  end
  tokens[i] = t - cost
end
for i = 1, #KEYS do
  local rate = tonumber(ARGV[2 * i])
  local burst = tonumber(ARGV[2 * i + 1])
  redis.call('HSET', KEYS[i], 't', tokens[i], 'ts', now)
  redis.call('PEXPIRE', KEYS[i], math.ceil((burst - tokens[i]) * 1000 / rate) + 1)
end
return 1
