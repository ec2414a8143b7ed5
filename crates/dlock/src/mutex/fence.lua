-- Draws the fencing token of a plain mutex hold, which is granted without one (the fast
-- path is a bare SET NX), and only while that hold is still held: so it is larger than
-- every fence an earlier holder drew (while it held) and smaller than every later
-- holder's. Bare (no prelude): a caller that reads every fence runs this once per hold.
-- KEYS[1] lock key; KEYS[2] fencing counter; ARGV[1] token
-- Returns the fence; 0 when the hold is no longer held (nothing drawn; also when another
-- kind holds the key now); -2 when the counter is not an integer (named by the caller).
local current = redis.pcall('GET', KEYS[1])
if current ~= ARGV[1] then
  if type(current) == 'table' and current.err then
    if string.sub(current.err, 1, 9) == 'WRONGTYPE' then
      return 0 -- another kind holds the key now: not us
    end
    return redis.error_reply(current.err)
  end
  return 0
end
local fence = redis.pcall('INCR', KEYS[2])
if type(fence) == 'table' and fence.err then
  if string.find(fence.err, 'not an integer', 1, true) or string.sub(fence.err, 1, 9) == 'WRONGTYPE' then
    return -2
  end
  return redis.error_reply(fence.err)
end
return fence
