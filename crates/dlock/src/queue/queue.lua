-- Prelude shared by the queued primitives (fair mutex, semaphore, rwlock writers).
-- A queue is two sorted sets in the lock's hash slot:
--   queue  : member = waiter token, score = arrival (server microseconds, strictly increasing)
--   leases : member = waiter token, score = end of the waiter's lease (server milliseconds)
-- A waiter whose lease ends (crashed, cancelled without cleanup) is dropped by the next
-- script that touches the queue.

-- Removes waiters whose lease ended; returns how many.
local function queue_purge(queue, leases, now)
  local dead = call_on('queue', 'ZRANGEBYSCORE', leases, '-inf', fmt(now))
  for _, waiter in ipairs(dead) do
    redis.call('ZREM', queue, waiter)
  end
  if #dead > 0 then
    redis.call('ZREMRANGEBYSCORE', leases, '-inf', fmt(now))
  end
  return #dead
end

-- Puts a waiter at the end of the queue (if not queued yet) and refreshes its lease.
-- Returns its rank (0 = head).
local function queue_join(queue, leases, waiter, now, lease_ms)
  if not redis.call('ZSCORE', queue, waiter) then
    local arrival = now_us()
    local tail = redis.call('ZRANGE', queue, -1, -1, 'WITHSCORES')
    if tail[2] and tonumber(tail[2]) >= arrival then
      arrival = tonumber(tail[2]) + 1
    end
    redis.call('ZADD', queue, fmt(arrival), waiter)
  end
  redis.call('ZADD', leases, fmt(now + lease_ms), waiter)
  -- An abandoned queue disappears by itself.
  keep_alive(queue, lease_ms)
  keep_alive(leases, lease_ms)
  return redis.call('ZRANK', queue, waiter)
end

local function queue_leave(queue, leases, waiter)
  redis.call('ZREM', queue, waiter)
  redis.call('ZREM', leases, waiter)
end

-- The rank a waiter has, or would have if it joined now.
local function queue_rank(queue, waiter)
  local rank = redis.call('ZRANK', queue, waiter)
  if rank then
    return rank
  end
  return redis.call('ZCARD', queue)
end

local function queue_head(queue)
  return call_on('queue', 'ZRANGE', queue, 0, 0)[1]
end

-- After an exclusive hold ended: wakes the next in the queue (a fair waiter or a writer)
-- if there is one, else every waiter on `channel` (mutex waiters, readers).
local function wake_after_exclusive(queue, leases, prefix, channel)
  queue_purge(queue, leases, now_ms())
  local head = queue_head(queue)
  if head then
    notify(prefix .. head, 'one')
  else
    notify(channel, 'all')
  end
end

-- Wakes exactly one waiter on its own channel.
local function wake(prefix, waiter)
  if waiter then
    notify(prefix .. waiter, 'one')
  end
end

-- `waiter` was granted: it leaves the queue, and the next in line is woken to take what
-- is still free or to watch the new hold's lease.
local function queue_granted(queue, leases, prefix, waiter)
  queue_leave(queue, leases, waiter)
  wake(prefix, queue_head(queue))
end

-- The rank of `waiter` in the queue (0: first in line); with `join` = '1' it takes or
-- refreshes its leased place first.
local function queue_place(queue, leases, waiter, now, join, lease_ms)
  if join == '1' then
    return queue_join(queue, leases, waiter, now, tonumber(lease_ms))
  end
  return queue_rank(queue, waiter)
end

-- Grants the string hold at `key` to `waiter`, first in line, for `lease_ms` with the next
-- fence at `fence_key`, and passes its place in line on: the grant of the fair mutex and
-- of the writer (their KEYS and ARGV share a layout). Returns the acquire's reply.
local function grant_in_line(key, fence_key, queue, leases, prefix, waiter, lease_ms)
  local fence = next_fence(fence_key)
  redis.call('SET', key, waiter, 'PX', lease_ms)
  queue_granted(queue, leases, prefix, waiter)
  return {1, fence}
end
