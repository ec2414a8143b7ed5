-- Grants the mutex to a token, atomically with its fencing token.
-- KEYS[1] lock key (a plain string holding the owner's token, with a PX expiry)
-- KEYS[2] fencing counter (never expires, only grows)
-- ARGV[1] token, ARGV[2] lease in milliseconds
-- Returns {1, fence}   granted; also for a resent acquire by the same token, which keeps
--                      the fence of its grant (no other grant can have happened since)
--         {0, pttl}    held by another token (pttl -1: the key has no expiry)
--         {-1, n}      KEYS[n] holds a value that is not ours to interpret
local current = redis.pcall('GET', KEYS[1])
if type(current) == 'table' and current.err then
  return {-1, 1}
end
if current == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  local fence = tonumber(redis.pcall('GET', KEYS[2]))
  if fence == nil then
    return {-1, 2}
  end
  return {1, fence}
end
if current then
  return {0, redis.call('PTTL', KEYS[1])}
end
-- Count first: if the counter is not a number, nothing is granted.
local fence = redis.pcall('INCR', KEYS[2])
if type(fence) == 'table' and fence.err then
  return {-1, 2}
end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
return {1, fence}
