-- Prelude of every dlock script: time, number formatting, and the one way scripts report
-- a key that holds something they cannot use.
--
-- What a lock key holds tells its kind:
--   a string            a token: mutex, fair mutex, write lock (or another client's SET NX lock)
--   a hash with '~kind' 'reentrant', 'read' (read holds of a read-write lock), 'semaphore'
-- so every kind occupies the lock key itself while held, and any two kinds on one name
-- exclude each other: busy, or a typed error naming what was found.
--
-- Refusals by the server (NOPERM, OOM, READONLY, ...) are never disguised: they are raised
-- as they are. Only WRONGTYPE becomes a DLOCKTYPE error: 'DLOCKTYPE <found> <wanted> <key>'.

local KIND = '~kind'

-- Lua prints large numbers in exponent notation, which Redis does not parse as integers.
local function fmt(n)
  return string.format('%.0f', n)
end

-- (fencing.lua comes first in every script with the prelude.)
local now_us = clock_us

local function now_ms()
  return math.floor(now_us() / 1000)
end

local function type_error(key, wanted)
  local found = redis.call('TYPE', key).ok
  if found == 'hash' then
    found = redis.call('HGET', key, KIND) or 'hash'
  elseif found == 'string' and wanted == 'counter' then
    found = 'text' -- a string, but not a number
  end
  return {err = 'DLOCKTYPE ' .. found .. ' ' .. wanted .. ' ' .. key}
end

-- True for an error caught by pcall that is a DLOCKTYPE error (pcall may hand it back as
-- the raised table or as its text).
local function is_type_error(caught)
  local text = caught
  if type(caught) == 'table' then
    text = caught.err
  end
  return type(text) == 'string' and string.find(text, 'DLOCKTYPE', 1, true) ~= nil
end

-- Raises again an error caught by pcall, as an error reply (not as text with a position).
local function reraise(caught)
  if type(caught) == 'table' then
    error(caught)
  end
  error({err = tostring(caught)})
end

-- redis.call that turns WRONGTYPE on `key` into a DLOCKTYPE error and re-raises the rest.
local function call_on(wanted, command, key, ...)
  local reply = redis.pcall(command, key, ...)
  if type(reply) == 'table' and reply.err then
    if string.sub(reply.err, 1, 9) == 'WRONGTYPE' then
      error(type_error(key, wanted))
    end
    error(reply)
  end
  return reply
end

-- The token in a string lock key (false when free).
local function token_at(key)
  return call_on('string', 'GET', key)
end

-- A fence, or the error for why the counter at `key` gave none (see fencing.lua).
local function fence_or_raise(key, fence, problem)
  if fence then
    return fence
  elseif problem == 'huge' then
    error({err = 'DLOCKTYPE huge counter ' .. key})
  elseif problem == 'counter' then
    error(type_error(key, 'counter'))
  end
  error(problem)
end

-- Draws the next fencing token (see fencing.lua). Counting comes first: if the counter
-- cannot count, nothing is granted.
local function next_fence(key)
  return fence_or_raise(key, draw_fence(key))
end

-- The last fencing token drawn (for a resent acquire of a string lock).
local function last_fence(key)
  return fence_or_raise(key, fence_counter(key))
end

-- The kind of dlock hash at `key` (false when the key does not exist); anything else that
-- is not a hash of kind `wanted` is a DLOCKTYPE error.
local function hash_kind(key, wanted)
  local kind = call_on(wanted, 'HGET', key, KIND)
  if kind == wanted then
    return kind
  end
  if kind or redis.call('EXISTS', key) == 1 then
    error(type_error(key, wanted))
  end
  return false
end

-- Never shortens: raises the key's expiry to at least `lease` ms.
local function keep_alive(key, lease)
  if redis.call('PTTL', key) < lease then
    redis.call('PEXPIRE', key, lease)
  end
end

-- Announces on a channel. Notifications only spare waiters a poll: a user whose ACL does
-- not allow the channel still locks and releases (its waiters poll), so a refused
-- PUBLISH is ignored.
local function notify(channel, payload)
  redis.pcall('PUBLISH', channel, payload)
end
