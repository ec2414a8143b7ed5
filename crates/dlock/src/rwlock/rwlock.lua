-- Prelude of the read-write lock scripts. Keys (one hash slot):
--   KEYS[1] the lock key: free; a string holding the writer's token (the Mutex format); or
--           a hash of read holds (entries.lua):
--             ~kind = 'read', ~ends = the latest lease end
--             h:<hold token> = '<end of its lease, ms>|<owner id>'
--             o:<owner> = the owner's live holds, f:<owner> = fence of its outermost grant
--   KEYS[2] fencing counter (shared by write and read grants)
--   KEYS[3] writer queue, KEYS[4] writer waiter leases (see queue.lua)
--   KEYS[5] the expiry index of the read holds (entries.lua)
-- Every read hold has its own token and lease: one hold's release or expiry removes only
-- that hold. The hash expires with its longest lease, so no reader state outlives readers.

-- What the lock key holds: 'free', 'write' or 'read', and for 'read' the values of
-- `fields` of the hash (one HMGET: state and fields in one command); anything else on the
-- key is a DLOCKTYPE error.
local function rw_read(key, fields)
  local got = entries_read(key, 'read', fields)
  if got then
    return 'read', got
  elseif got == false then
    return 'free', {}
  elseif redis.call('TYPE', key).ok == 'string' then
    return 'write', {}
  end
  error(type_error(key, 'read'))
end

-- 'free', 'write' or 'read' (see rw_read).
local function rw_state(key)
  return (rw_read(key, {}))
end

-- Drops expired read holds; returns whether any live hold is left, the soonest lease end,
-- and whether values read before are stale (`indexed` as for entries_purge).
local function purge_reads(key, now, indexed)
  return entries_purge(key, KEYS[5], now, function(owner)
    if redis.call('HINCRBY', key, 'o:' .. owner, -1) <= 0 then
      redis.call('HDEL', key, 'o:' .. owner, 'f:' .. owner)
    end
  end, indexed)
end

-- Adds a read hold `hold` for `owner` (a new reader, a re-entry or a downgrading writer):
-- `holds` the owner's holds before it, `fence` its outermost grant's fence, `latest` the
-- hash's '~ends' (false: the key holds no read hash yet).
local function add_read(key, owner, hold, now, lease, fence, holds, latest)
  local more = {'o:' .. owner, holds + 1, 'f:' .. owner, fmt(fence)}
  if not latest then
    entries_begin(KEYS[5])
    table.insert(more, KIND)
    table.insert(more, 'read')
  end
  entry_put(key, KEYS[5], hold, now + lease, owner, latest, more)
  return {1, fence, holds + 1}
end

-- Restarts the lease of a read hold that exists (a resend); returns what a grant returns.
-- `holds`, `fence`, `latest` as the caller read them.
local function restart_read(key, owner, hold, now, lease, holds, fence, latest)
  entry_put(key, KEYS[5], hold, now + lease, owner, latest)
  return {1, tonumber(fence), tonumber(holds)}
end
