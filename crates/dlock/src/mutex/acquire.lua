-- The mutex's slow path: run when the fast path's `SET key token NX PX lease` found the key
-- taken (see mod.rs), and as the whole attempt when the fence is drawn at grant. It tells
-- our own earlier grant (a resend whose first reply was lost), another holder and a key of
-- another kind apart.
-- KEYS[1] lock key (a string holding the owner's token, with a PX expiry)
-- KEYS[2] fencing counter (never expires, only grows)
-- ARGV[1] token, ARGV[2] lease in milliseconds, ARGV[3] '1' to draw the fence with the grant
-- Returns {1}          granted without a fence (drawn later, on first read: see fence.lua)
--         {1, fence}   granted with its fence
--                      Granted also when the key already holds our token (a resent
--                      acquire): the lease restarts as the first grant did, and the fence
--                      is the last one drawn (no other grant can have drawn since)
--         {0, pttl}    held by another token (pttl -1: the key has no expiry)
local eager = ARGV[3] == '1'
local current = token_at(KEYS[1])
if current == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  if eager then
    return {1, last_fence(KEYS[2])}
  end
  return {1}
end
if current then
  return {0, redis.call('PTTL', KEYS[1])}
end
if eager then
  -- Counting first: if the counter is not a number, nothing is granted.
  local fence = next_fence(KEYS[2])
  redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
  return {1, fence}
end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
return {1}
