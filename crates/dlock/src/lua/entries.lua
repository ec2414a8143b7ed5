-- Leased entries of a dlock hash (read holds, semaphore permits): one field per hold,
--   'h:<token>' = '<end of its lease, server ms>|<data>'
--   '~ends'     = the latest end among them: when hash and index expire
-- and beside the hash, in the lock's hash slot, its expiry index: a sorted set of the
-- tokens scored by the end of their lease. The index finds the expired holds without
-- reading the live ones, and its size is the number of holds (O(1)), so no operation
-- reads every holder: a read lock held by a thousand workers costs each acquire what it
-- costs with eight. Hash and index expire together with the latest lease, so nothing of
-- them outlives their holders, and both are deleted when the last entry goes.
--
-- Every Redis command a script runs costs about a microsecond of the server's one thread,
-- so these helpers take what the caller already read (one HMGET) instead of reading again.

local ENDS = '~ends'

local function entry_parse(value)
  local ends, data = string.match(value, '^(%d+)|(.*)$')
  return tonumber(ends), data
end

-- The values of `fields` of the dlock hash of kind `wanted` at `key`, with its kind in the
-- same command (one HMGET); false when the key does not exist, nil when it holds anything
-- else (another type, or a hash of another kind).
local function entries_read(key, wanted, fields)
  local got = redis.pcall('HMGET', key, KIND, unpack(fields))
  if got.err then
    if string.sub(got.err, 1, 9) ~= 'WRONGTYPE' then
      error(got)
    end
    return nil
  end
  local kind = got[1]
  if kind == wanted then
    return {select(2, unpack(got))} -- a reply table is read-only: copied without the kind
  end
  if not kind and redis.call('EXISTS', key) == 0 then
    return false
  end
  return nil
end

-- Like entries_read, for the semaphore: anything else at `key` is a DLOCKTYPE error.
local function permits_read(key, fields)
  local got = entries_read(key, 'semaphore', fields)
  if got == nil then
    error(type_error(key, 'semaphore'))
  end
  return got
end

-- Hash and index expire at `ends` (server ms), recorded in '~ends'.
local function entries_expire_at(key, index, ends)
  redis.call('HSET', key, ENDS, fmt(ends))
  redis.call('PEXPIREAT', key, fmt(ends))
  redis.call('PEXPIREAT', index, fmt(ends))
end

-- Puts the entry `token` (a new hold, or a restarted lease) with `more` field/value
-- pairs in the same write. `latest` is the '~ends' the caller read (false for a new
-- hash): the keys' expiry moves only when this lease ends later. Returns 1 when the
-- token was not in the index yet, else 0.
local function entry_put(key, index, token, ends, data, latest, more)
  if type(data) == 'number' then
    data = fmt(data) -- a fence: `..` would print it in 14 digits
  end
  local fields = {'h:' .. token, fmt(ends) .. '|' .. data}
  for _, v in ipairs(more or {}) do
    table.insert(fields, v)
  end
  local later = not latest or ends > tonumber(latest)
  if later then
    table.insert(fields, ENDS)
    table.insert(fields, fmt(ends))
  end
  redis.call('HSET', key, unpack(fields))
  local added = redis.call('ZADD', index, fmt(ends), token)
  if later then
    redis.call('PEXPIREAT', key, fmt(ends))
    redis.call('PEXPIREAT', index, fmt(ends))
  end
  return added
end

-- Removes the entry `token` whose value was `value` (as the caller read it), and with it
-- the fields `more` returns (called once the index lost the entry; nil: none). The index
-- goes first: a write that takes no memory, after which a server at maxmemory lets the
-- script's later writes through (it refuses only a script's first write that may take
-- memory), so a release works on a full server. Returns the end of its lease, and
-- whether the index had the entry (then it is whole: see entries_purge's `indexed`).
local function entry_remove(key, index, token, value, more)
  local indexed = redis.call('ZREM', index, token) == 1
  redis.call('HDEL', key, 'h:' .. token, unpack(more and more() or {}))
  return (entry_parse(value)), indexed
end

-- Before the first entry of a new hash: an index left by a hash deleted outside dlock (a
-- user's DEL) must not count holds that no longer exist.
local function entries_begin(index)
  redis.call('DEL', index)
end

-- Rebuilds the index of the hash at `key` from its entries, and records its latest end:
-- for a hash whose index is gone (evicted, deleted by hand) or was never made (written by
-- a dlock without it; see docs/decisions.md). The index is never trusted partially: a
-- count from it would let a semaphore over-grant. Reads the whole hash, once.
local function entries_reindex(key, index)
  local fields = redis.call('HGETALL', key)
  local latest = nil
  for i = 1, #fields, 2 do
    if string.sub(fields[i], 1, 2) == 'h:' then
      local ends = entry_parse(fields[i + 1])
      if ends then
        redis.call('ZADD', index, fmt(ends), string.sub(fields[i], 3))
        if not latest or ends > latest then
          latest = ends
        end
      end
    end
  end
  if latest then
    entries_expire_at(key, index, latest)
  end
end

-- Removes the entries whose lease ended (calling forget(data, token) for each), reading only
-- those; deletes hash and index when none is left (unless `keep_emptied`, below). Returns
-- whether any live entry is left, the soonest end among them, and whether values the
-- caller read before are stale (entries were removed, or the index rebuilt). `indexed`:
-- the caller has just removed an entry from this very index (entry_remove said so), so
-- the index exists and is whole (every dlock that writes an entry writes its index too,
-- and a lost index is rebuilt whole): found empty, no entry is left, and the hash is
-- deleted without reading it, or, with `keep_emptied`, kept for the caller, who then owns
-- deleting it (a release about to put the next holder's entry in it: that spares a DEL
-- and the kind's write); the fourth value says it was kept.
local function entries_purge(key, index, now, forget, indexed, keep_emptied)
  local first = redis.call('ZRANGE', index, 0, 0, 'WITHSCORES')
  if first[1] and tonumber(first[2]) > now then
    return true, tonumber(first[2]), false
  end
  if not first[1] and indexed then
    if keep_emptied then
      return false, nil, true, true
    end
    redis.call('DEL', key, index)
    return false, nil, true
  end
  local rebuilt = false
  if not first[1] then
    -- No index beside a hash that exists: rebuild it rather than count nothing.
    entries_reindex(key, index)
    rebuilt = true
  end
  local due = redis.call('ZRANGEBYSCORE', index, '-inf', fmt(now))
  for _, token in ipairs(due) do
    local value = redis.call('HGET', key, 'h:' .. token)
    if value then
      redis.call('HDEL', key, 'h:' .. token)
      if forget then
        local _, data = entry_parse(value)
        forget(data, token)
      end
    end
  end
  if #due > 0 then
    redis.call('ZREMRANGEBYSCORE', index, '-inf', fmt(now))
  end
  first = redis.call('ZRANGE', index, 0, 0, 'WITHSCORES')
  if not first[1] then
    redis.call('DEL', key, index)
    return false, nil, true
  end
  -- The latest lease is among the live ones (it ends after every expired one), so the
  -- keys' expiry stands.
  return true, tonumber(first[2]), rebuilt or #due > 0
end

-- After a removed entry whose lease ended at `ended`: when it was the latest (`latest`,
-- as read), hash and index now expire with the latest lease left. Returns the '~ends'
-- now recorded.
local function entries_shrink(key, index, ended, latest)
  if latest and ended < tonumber(latest) then
    return latest
  end
  local last = redis.call('ZRANGE', index, -1, -1, 'WITHSCORES')[2]
  if last then
    entries_expire_at(key, index, tonumber(last))
  end
  return last
end
