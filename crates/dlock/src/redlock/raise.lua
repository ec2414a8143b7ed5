-- Redlock's second round: raises this node's fencing counter to the fence a quorum's
-- grant chose (the largest counter among the granting nodes), only upward, and only
-- while the hold is still ours here. A later grant's quorum meets every majority, so it
-- meets a node raised here while we held it, and its own fence comes out larger.
-- Bare (no prelude): the common case (counters in step) never runs it.
-- KEYS[1] lock key; KEYS[2] fencing counter; ARGV[1] token; ARGV[2] the fence
-- Returns 1 raised (or already that high), 0 the hold is not ours here (nothing touched),
-- -2 the counter is not an integer (named by the caller).
local current = redis.pcall('GET', KEYS[1])
if refused(current) and not wrong_type(current) then
  return redis.error_reply(current.err)
elseif current ~= ARGV[1] then
  return 0
end
local last = redis.pcall('GET', KEYS[2])
if refused(last) and not counter_error(last) then
  return redis.error_reply(last.err)
end
last = not refused(last) and (last == false and 0 or tonumber(last))
if not last then
  return -2
end
if last < tonumber(ARGV[2]) then
  redis.call('SET', KEYS[2], ARGV[2])
end
return 1
