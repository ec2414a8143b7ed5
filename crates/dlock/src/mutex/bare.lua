-- Helpers of the mutex's bare scripts (they skip the shared prelude, which is defined on
-- every call, because they run once per hold).

-- True for an error reply caught by redis.pcall.
local function refused(reply)
  return type(reply) == 'table' and reply.err ~= nil
end

-- True for a caught WRONGTYPE error.
local function wrong_type(reply)
  return refused(reply) and string.sub(reply.err, 1, 9) == 'WRONGTYPE'
end

-- True for a caught error of a fencing counter that cannot count (not an integer, or not
-- a string at all).
local function counter_error(reply)
  return wrong_type(reply) or (refused(reply) and string.find(reply.err, 'not an integer', 1, true) ~= nil)
end
