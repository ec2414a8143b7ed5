-- Grants the mutex to a token, atomically with its fencing token.
-- KEYS[1] lock key (a string holding the owner's token, with a PX expiry)
-- KEYS[2] fencing counter (never expires, only grows)
-- ARGV[1] token, ARGV[2] lease in milliseconds
-- Returns {1, fence}   granted; also for a resent acquire by the same token, which restarts
--                      the lease as the first grant did and keeps its fence (no other
--                      grant can have happened since)
--         {0, pttl}    held by another token (pttl -1: the key has no expiry)
local current = token_at(KEYS[1])
if current == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return {1, last_fence(KEYS[2])}
end
if current then
  return {0, redis.call('PTTL', KEYS[1])}
end
local fence = next_fence(KEYS[2])
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
return {1, fence}
