-- Prelude of the read-write lock scripts. Keys (one hash slot):
--   KEYS[1] writer: string holding the writer's token, PX expiry (the Mutex format)
--   KEYS[2] fencing counter (shared by write and read grants)
--   KEYS[3] readers: sorted set, member = reader owner id, score = end of its lease (ms)
--   KEYS[4] reads: hash, '<owner>:n' holds, '<owner>:req' last request, '<owner>:fence'
--   KEYS[5] writer queue, KEYS[6] writer waiter leases (see queue.lua)
-- Every reader is tracked on its own: one reader's release or expiry removes only its hold.

local function forget_reader(reads, owner)
  redis.call('HDEL', reads, owner .. ':n', owner .. ':req', owner .. ':fence')
end

-- Drops readers whose lease ended.
local function purge_readers(readers, reads, now)
  local expired = redis.call('ZRANGEBYSCORE', readers, '-inf', fmt(now))
  for _, owner in ipairs(expired) do
    forget_reader(reads, owner)
  end
  if #expired > 0 then
    redis.call('ZREMRANGEBYSCORE', readers, '-inf', fmt(now))
  end
end

local function keep_alive(key, lease)
  if redis.call('PTTL', key) < lease then
    redis.call('PEXPIRE', key, lease)
  end
end

-- Adds one read hold for owner (a new reader or a downgrading writer).
local function add_reader(owner, now, lease, request, fence)
  -- GT adds a new reader and never shortens an existing reader's lease.
  redis.call('ZADD', KEYS[3], 'GT', fmt(now + lease), owner)
  local holds = redis.call('HINCRBY', KEYS[4], owner .. ':n', 1)
  redis.call('HSET', KEYS[4], owner .. ':req', request, owner .. ':fence', fence)
  -- The readers set expires when abandoned; the reads hash has no expiry (renewals could
  -- not keep it alive): its fields go with their reader, and it vanishes when empty.
  keep_alive(KEYS[3], lease)
  return holds
end

-- Checks the writer key's type; returns its value (false when free) or nil on wrong type.
local function writer_of(key)
  local current = redis.pcall('GET', key)
  if type(current) == 'table' and current.err then
    return nil
  end
  return current
end
