-- Draws the fencing token of a plain mutex hold, which is granted without one (the fast
-- path is a bare SET NX), and only while that hold is still held: so it is larger than
-- every fence an earlier holder drew (while it held) and smaller than every later
-- holder's. Bare (no prelude): a caller that reads every fence runs this once per hold.
-- KEYS[1] lock key; KEYS[2] fencing counter; ARGV[1] token
-- Returns the fence; 0 when the hold is no longer held (nothing drawn; also when another
-- kind holds the key now); -2 when the counter is not an integer (named by the caller).
local current = redis.pcall('GET', KEYS[1])
if refused(current) and not wrong_type(current) then
  return redis.error_reply(current.err)
elseif current ~= ARGV[1] then
  return 0 -- expired, taken, or another kind holds the key now: not us
end
local fence = redis.pcall('INCR', KEYS[2])
if counter_error(fence) then
  return -2
elseif refused(fence) then
  return redis.error_reply(fence.err)
end
return fence
