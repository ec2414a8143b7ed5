-- Prelude of the read-write lock scripts. Keys (one hash slot):
--   KEYS[1] the lock key: free; a string holding the writer's token (the Mutex format); or
--           a hash of read holds (entries.lua):
--             ~kind = 'read'
--             h:<hold token> = '<end of its lease, ms>|<owner id>'
--             o:<owner> = the owner's live holds, f:<owner> = fence of its outermost grant
--   KEYS[2] fencing counter (shared by write and read grants)
--   KEYS[3] writer queue, KEYS[4] writer waiter leases (see queue.lua)
--   KEYS[5] the expiry index of the read holds (entries.lua)
-- Every read hold has its own token and lease: one hold's release or expiry removes only
-- that hold. The hash expires with its longest lease, so no reader state outlives readers.

-- 'free', 'write' or 'read'; anything else on the key is a DLOCKTYPE error.
local function rw_state(key)
  local found = redis.call('TYPE', key).ok
  if found == 'none' then
    return 'free'
  elseif found == 'string' then
    return 'write'
  elseif found == 'hash' and redis.call('HGET', key, KIND) == 'read' then
    return 'read'
  end
  error(type_error(key, 'read'))
end

-- Drops expired read holds; returns live holds and the soonest lease end.
local function purge_reads(key, now)
  return entries_purge(key, KEYS[5], now, function(owner)
    if redis.call('HINCRBY', key, 'o:' .. owner, -1) <= 0 then
      redis.call('HDEL', key, 'o:' .. owner, 'f:' .. owner)
    end
  end)
end

-- Adds a read hold `hold` for `owner` (a new reader, a re-entry or a downgrading writer).
-- The key holds no read hash yet when `first`.
local function add_read(key, owner, hold, now, lease, fence, first)
  if first then
    entries_begin(KEYS[5])
  end
  if redis.call('HSETNX', key, 'f:' .. owner, fence) == 0 then
    fence = tonumber(redis.call('HGET', key, 'f:' .. owner))
  end
  redis.call('HSET', key, KIND, 'read')
  entry_put(key, KEYS[5], hold, now + lease, owner)
  local holds = redis.call('HINCRBY', key, 'o:' .. owner, 1)
  entries_settle(key, KEYS[5], now)
  return fence, holds
end

-- Restarts the lease of a read hold that exists (a resend); returns what a grant returns.
local function restart_read(key, owner, hold, now, lease)
  entry_put(key, KEYS[5], hold, now + lease, owner)
  entries_settle(key, KEYS[5], now)
  return {1, tonumber(redis.call('HGET', key, 'f:' .. owner)),
    tonumber(redis.call('HGET', key, 'o:' .. owner))}
end
