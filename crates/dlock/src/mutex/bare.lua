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

-- Whether the string hold at `key` is `token`'s: false when it expired, was taken, or
-- another kind holds the key. A refusal (an ACL, OOM, ...) ends the script with the
-- server's own words.
local function held_by(key, token)
  local current = redis.pcall('GET', key)
  if refused(current) and not wrong_type(current) then
    error(current)
  end
  return current == token
end

-- What a fence counter read or draw gave (`value`, `problem`: see fencing.lua): the
-- value, or nil when the counter cannot count (the caller answers -2). A refusal ends the
-- script with the server's own words.
local function counted(value, problem)
  if refused(problem) then
    error(problem)
  end
  return value
end
