-- How each kind of hold is found and restarted, for renewal and "is it still held?".
--   's' the key is a string holding the token (mutex, fair mutex, write lock)
--   'r' the key is a reentrant hash with a field 'h:<token>'; the holds share its expiry
--   'e' the key is a hash of leased entries 'h:<token>' = '<end ms>|<data>' (read holds,
--       semaphore permits) with its expiry index beside it (see entries.lua)

-- What the hold is now: false when not held, else a value hold_restart uses.
local function hold_state(kind, key, token, now)
  if kind == 's' then
    return token_at(key) == token
  end
  local got = call_on('hash', 'HMGET', key, 'h:' .. token, ENDS)
  if not got[1] then
    return false
  end
  if kind == 'r' then
    return true
  end
  local ends, data = entry_parse(got[1])
  if ends <= now then
    return false
  end
  return {data, got[2]}
end

-- Starts the hold's lease over: `lease` ms from now. `index` is the expiry index of an
-- 'e' hold.
local function hold_restart(kind, key, index, token, now, lease, state)
  if kind == 's' then
    redis.call('PEXPIRE', key, lease)
    return
  end
  if kind == 'e' then
    if entry_put(key, index, token, now + lease, state[1], state[2]) == 1 then
      -- A held token missing from the index: the index is gone or was never made.
      -- Rebuilt whole (its expiry and '~ends' from every hold), never left partial.
      entries_reindex(key, index)
    end
    return
  end
  keep_alive(key, lease)
end
