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

-- nil when the string hold at `key` is `token`'s; otherwise the reply to end the script
-- with: 0 when it expired, was taken or another kind holds the key, or the server's
-- refusal (an ACL, OOM, ...) in its own words. (Returned, not raised: a raised error
-- table loses its words on Redis 6.2.)
local function unless_held(key, token)
  local current = redis.pcall('GET', key)
  if refused(current) and not wrong_type(current) then
    return redis.error_reply(current.err)
  elseif current ~= token then
    return 0
  end
  return nil
end

-- What a fence counter read or draw gave (`value`, `problem`: see fencing.lua): the value,
-- or nil and the reply to end the script with: the server's refusal in its own words, or
-- -2 when the counter cannot count.
local function counted(value, problem)
  if refused(problem) then
    return nil, redis.error_reply(problem.err)
  elseif not value then
    return nil, -2
  end
  return value
end
