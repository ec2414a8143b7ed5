-- The mutex's slow path: run when the fast path's `SET key token NX PX lease` found the key
-- taken (see mod.rs), and as the whole attempt when the fence is drawn at grant. It tells
-- our own earlier grant (a resend whose first reply was lost), another holder and a key of
-- another kind apart. Bare (no prelude): with the fence drawn at grant it runs once per
-- acquire.
-- KEYS[1] lock key (a string holding the owner's token, with a PX expiry)
-- KEYS[2] fencing counter (never expires, only grows; see fencing.lua)
-- ARGV[1] token, ARGV[2] lease in milliseconds, ARGV[3] '1' to draw the fence with the grant,
-- ARGV[4] '1' to tell whether the fence came from the clock floor (Redlock)
-- Returns {1}          granted without a fence (drawn later, on first read: see fence.lua)
--         {1, fence}   granted with its fence ({1, fence, clock} with ARGV[4]: clock is 1
--                      when the fence is the server's clock, not the counter + 1)
--                      Granted also when the key already holds our token (a resent
--                      acquire): the lease restarts as the first grant did, and the fence
--                      is the last one drawn (no other grant can have drawn since; its
--                      origin is not known then: clock 0)
--         {0, pttl}    held by another token (pttl -1: the key has no expiry)
--         {-1}         the lock key holds another type; {-2} the counter cannot count (not
--                      an integer, or at 2^53) (both named by the caller; nothing granted)
local current = redis.pcall('GET', KEYS[1])
if wrong_type(current) then
  return {-1}
elseif refused(current) then
  return redis.error_reply(current.err)
end
local eager = ARGV[3] == '1'
local tell = ARGV[4] == '1'
if current == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  if not eager then
    return {1}
  end
  local last, problem = fence_counter(KEYS[2])
  if refused(problem) then
    return redis.error_reply(problem.err)
  elseif not last or last == 0 then
    return {-2}
  end
  if tell then
    return {1, last, 0}
  end
  return {1, last}
end
if current then
  return {0, redis.call('PTTL', KEYS[1])}
end
if not eager then
  redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
  return {1}
end
-- Counting first: if the counter cannot count, nothing is granted.
local fence, outcome = draw_fence(KEYS[2])
if refused(outcome) then
  return redis.error_reply(outcome.err)
elseif not fence then
  return {-2}
end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
if tell then
  return {1, fence, outcome and 1 or 0}
end
return {1, fence}
