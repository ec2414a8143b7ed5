-- Leased entries of a dlock hash (read holds, semaphore permits): one field per hold,
--   'h:<token>' = '<end of its lease, server ms>|<data>'
-- The hash itself expires with its longest lease (see keep_alive), so nothing of it can
-- outlive its holders, and it is deleted when its last entry goes.

local function entry_parse(value)
  local ends, data = string.match(value, '^(%d+)|(.*)$')
  return tonumber(ends), data
end

local function entry_put(key, token, ends, data)
  if type(data) == 'number' then
    data = fmt(data) -- a fence: `..` would print it in 14 digits
  end
  redis.call('HSET', key, 'h:' .. token, fmt(ends) .. '|' .. data)
end

-- Removes the entries whose lease ended (calling forget(data) for each); deletes the hash
-- when none is left, and otherwise lets it expire with its latest lease, so it never
-- outlives its holders. Returns the number of live entries and the soonest end among them.
local function entries_purge(key, now, forget)
  local fields = redis.call('HGETALL', key)
  local live, soonest, latest = 0, nil, 0
  for i = 1, #fields, 2 do
    if string.sub(fields[i], 1, 2) == 'h:' then
      local ends, data = entry_parse(fields[i + 1])
      if ends <= now then
        redis.call('HDEL', key, fields[i])
        if forget then
          forget(data)
        end
      else
        live = live + 1
        if soonest == nil or ends < soonest then
          soonest = ends
        end
        if ends > latest then
          latest = ends
        end
      end
    end
  end
  if live == 0 then
    redis.call('DEL', key)
  elseif redis.call('PTTL', key) > latest - now then
    redis.call('PEXPIRE', key, fmt(latest - now))
  end
  return live, soonest
end
