-- Leased entries of a dlock hash (read holds, semaphore permits): one field per hold,
--   'h:<token>' = '<end of its lease, server ms>|<data>'
-- and beside the hash, in the lock's hash slot, its expiry index: a sorted set of the
-- tokens scored by the end of their lease. The index finds the expired holds without
-- reading the live ones, and its size is the number of holds (O(1)), so no operation
-- reads every holder: a read lock held by a thousand workers costs each acquire what it
-- costs with eight. Hash and index expire together with the longest lease, so nothing of
-- them outlives their holders, and both are deleted when the last entry goes.

local function entry_parse(value)
  local ends, data = string.match(value, '^(%d+)|(.*)$')
  return tonumber(ends), data
end

local function entry_put(key, index, token, ends, data)
  if type(data) == 'number' then
    data = fmt(data) -- a fence: `..` would print it in 14 digits
  end
  redis.call('HSET', key, 'h:' .. token, fmt(ends) .. '|' .. data)
  redis.call('ZADD', index, fmt(ends), token)
end

local function entry_remove(key, index, token)
  redis.call('HDEL', key, 'h:' .. token)
  redis.call('ZREM', index, token)
end

-- Before the first entry of a new hash: an index left by a hash deleted outside dlock (a
-- user's DEL) must not count holds that no longer exist.
local function entries_begin(index)
  redis.call('DEL', index)
end

-- Both keys expire with the latest lease: never later (nothing outlives its holders),
-- never earlier (the index must not vanish under a live hash).
local function entries_expire_with(key, index, latest, now)
  for _, k in ipairs({key, index}) do
    if redis.call('PTTL', k) ~= latest - now then
      redis.call('PEXPIRE', k, fmt(latest - now))
    end
  end
end

-- Removes the entries whose lease ended (calling forget(data) for each), reading only
-- those; deletes hash and index when none is left. Returns the number of live entries
-- and the soonest end among them.
local function entries_purge(key, index, now, forget)
  local due = redis.call('ZRANGEBYSCORE', index, '-inf', fmt(now))
  for _, token in ipairs(due) do
    local value = redis.call('HGET', key, 'h:' .. token)
    if value then
      redis.call('HDEL', key, 'h:' .. token)
      if forget then
        local _, data = entry_parse(value)
        forget(data)
      end
    end
  end
  if #due > 0 then
    redis.call('ZREMRANGEBYSCORE', index, '-inf', fmt(now))
  end
  local live = redis.call('ZCARD', index)
  if live == 0 then
    redis.call('DEL', key, index)
    return 0, nil
  end
  local soonest = tonumber(redis.call('ZRANGE', index, 0, 0, 'WITHSCORES')[2])
  if #due > 0 then
    -- The latest lease may have been among the expired: the keys live no longer than
    -- the latest that remains.
    local latest = tonumber(redis.call('ZRANGE', index, -1, -1, 'WITHSCORES')[2])
    entries_expire_with(key, index, latest, now)
  end
  return live, soonest
end

-- After an entry was put or removed: hash and index expire with the latest lease left.
local function entries_settle(key, index, now)
  local latest = redis.call('ZRANGE', index, -1, -1, 'WITHSCORES')[2]
  if not latest then
    redis.call('DEL', key, index)
    return
  end
  entries_expire_with(key, index, tonumber(latest), now)
end
