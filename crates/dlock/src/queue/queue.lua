-- Prelude shared by the queued primitives (fair mutex, semaphore, rwlock writers).
-- A queue is two sorted sets in the lock's hash slot:
--   queue  : member = waiter token, score = arrival (server microseconds, strictly increasing)
--   leases : member = waiter token, score = end of the waiter's lease (server milliseconds)
-- A waiter whose lease ends (crashed, cancelled without cleanup) is dropped by the next
-- script that touches the queue; a waiter leaves both together.
-- A queued waiter's token says what a direct grant gives it: '<token>~<ttl ms>' or, for a
-- semaphore's waiter, '<token>~<ttl ms>~<its N>', followed by '~w<k>' when it takes k > 1
-- permits at once (see waiter_wants, permit_weight; `QueueKeys::waiter_token` writes it),
-- so a hand-off reads and a queue stores nothing more. A dlock before weights reads no
-- ttl in a token ending in '~w<k>': it wakes such a waiter rather than hand it one permit.
--
-- Direct hand-off: a release grants the lock to the first live waiter in the same script
-- (its token, a fresh lease and fence) and tells that waiter alone 'granted <fence>' (see
-- waiter_address): the waiter holds the lock without sending anything. The next in line
-- is told the new lease ('watch <ms>') and sleeps until it ends unless handed the lock.
-- The lease of a direct grant is the waiter's ttl, but never longer than what is left of
-- its waiter lease, so a waiter that died after its last check-in holds the lock no longer
-- than a dead waiter holds its place in line.

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

-- The first two in line (either may be nil), read at once: a hand-off needs both; and
-- the first one's arrival.
local function queue_first_two(queue)
  local two = call_on('queue', 'ZRANGE', queue, 0, 1, 'WITHSCORES')
  return two[1], two[3], two[2]
end

-- Where a waiter listens, and how a message names it there. A dlock waiter's token is
-- '[label/]<client>.<random>' (hex): it listens on its client's channel, which every waiter
-- of that client for this lock shares (one subscription, kept between waits), and each
-- line names the token it is for. A token of any other form listens on a channel of its
-- own, where messages name nobody.
-- (The same reading as `client_tag_of` in session.rs.)
local function waiter_address(prefix, waiter)
  local tail = string.match(waiter, '([^/]*)$')
  local client = string.match(string.match(tail, '^([^~]*)'), '^(%x+)%.%x+$')
  if client then
    return prefix .. client, ' ' .. waiter
  end
  return prefix .. waiter, ''
end

-- Tells waiters what `words` say ({waiter, message} pairs: 'one' to look again,
-- 'granted <fence>', 'watch <ms>'), one PUBLISH per channel (lines in one message).
local function tell(prefix, words)
  local lines, order = {}, {}
  for _, word in ipairs(words) do
    local channel, to = waiter_address(prefix, word[1])
    if lines[channel] then
      lines[channel] = lines[channel] .. '\n' .. word[2] .. to
    else
      lines[channel] = word[2] .. to
      order[#order + 1] = channel
    end
  end
  for _, channel in ipairs(order) do
    notify(channel, lines[channel])
  end
end

-- Wakes exactly one waiter, alone.
local function wake(prefix, waiter)
  if waiter then
    tell(prefix, {{waiter, 'one'}})
  end
end

-- After `waiter` was granted and left the queue: with `fence`, a release handed it the
-- hold, and it is told so; the next in line (`next_waiter`, if any) is woken to take what
-- is still free (a semaphore's permits), or told the new hold's lease `watch_ms` (a string
-- hold: nothing is free), so it sleeps until that lease ends unless handed the lock
-- first, without an attempt to learn it. One message when both are of one client.
local function tell_after_grant(prefix, waiter, watch_ms, next_waiter, fence)
  local words = {}
  if fence then
    words[1] = {waiter, 'granted ' .. fmt(fence)}
  end
  if next_waiter and watch_ms then
    words[#words + 1] = {next_waiter, 'watch ' .. watch_ms}
  elseif next_waiter then
    words[#words + 1] = {next_waiter, 'one'}
  end
  tell(prefix, words)
end

-- `waiter` was granted: it leaves the queue, and it and the next in line are told what
-- they must know (tell_after_grant). `next_waiter`: who is next once `waiter` left, when
-- the caller read it already (false: nobody); nil to read it here.
local function queue_granted(queue, leases, prefix, waiter, watch_ms, next_waiter, fence)
  queue_leave(queue, leases, waiter)
  if next_waiter == nil then
    next_waiter = queue_head(queue)
  end
  tell_after_grant(prefix, waiter, watch_ms, next_waiter, fence)
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
  queue_granted(queue, leases, prefix, waiter, lease_ms)
  return {1, fence}
end

-- The number of permits a semaphore token takes: k for a token ending in '~w<k>', else 1
-- (the weight travels in the token: the permit it is granted is stored under it, so
-- every client reads a permit's weight from its field's name).
local function permit_weight(token)
  return tonumber(string.match(token, '~w(%d+)$')) or 1
end

-- What a queued waiter's token says it asks for: the ttl (ms) of its hold and, for a
-- semaphore's waiter, its N. Nil for a token that says nothing usable (a dlock before
-- this format, a ttl of 0): such a waiter is woken to take the lock itself.
local function waiter_wants(waiter)
  local ttl, limit = string.match(string.gsub(waiter, '~w%d+$', ''), '~(%d+)~?(%d*)$')
  ttl = tonumber(ttl)
  if not ttl or ttl < 1 then
    return nil
  end
  return ttl, tonumber(limit)
end

-- The first live waiter, the lease (ms) a direct grant gives it (its ttl, at most what is
-- left of its waiter lease), its limit (a semaphore waiter's N) and who is behind it
-- (false: nobody), and its arrival and waiter lease's end (scores, to put it back). Nil
-- when nobody waits; no lease when the waiter's token names no ttl (it is woken instead,
-- to take the lock itself).
local function queue_next_grant(queue, leases, now)
  local head, after, arrival = queue_first_two(queue)
  local lease_end = head and redis.call('ZSCORE', leases, head)
  if head and not (lease_end and tonumber(lease_end) > now) then
    -- The first in line is gone: drop every waiter whose lease ended.
    queue_purge(queue, leases, now)
    head, after, arrival = queue_first_two(queue)
    lease_end = head and redis.call('ZSCORE', leases, head)
  end
  if not head then
    return nil
  end
  after = after or false
  local ttl, limit = waiter_wants(head)
  if not ttl or not lease_end then
    return head, nil, nil, after
  end
  return head, math.min(ttl, tonumber(lease_end) - now), limit, after, arrival, lease_end
end

-- The next fence at `fence_key` for a direct grant, or nil when the counter cannot count
-- or the server refused the write: the release lets go of the lock either way, so the
-- first in line is woken instead, and its own attempt reports the problem.
local function hand_off_fence(fence_key)
  local ok, fence = pcall(draw_fence, fence_key)
  if ok then
    return fence
  end
  return nil
end

-- After a string hold at `key` ended (fair mutex, write lock): grants it directly to the
-- first waiter in line and tells it so (the grant overwrites `key`), or wakes it when its
-- token names no ttl or no fence can be drawn. Returns 'granted', 'woken', or nil when
-- nobody waits.
local function hand_off_string(key, fence_key, queue, leases, prefix, now)
  local head, lease, _, after, arrival, lease_end = queue_next_grant(queue, leases, now)
  if not head then
    return nil
  end
  if not lease then
    wake(prefix, head)
    return 'woken'
  end
  -- It leaves the queue before the fence is drawn: a full server (maxmemory) refuses a
  -- script's first write that may take memory, not its later ones, and a ZREM takes none.
  queue_leave(queue, leases, head)
  local fence = hand_off_fence(fence_key)
  if not fence then
    -- Back in its place, woken to try itself (its attempt names the problem); were it the
    -- only waiter, its leaving deleted the queue and its expiry with it.
    redis.call('ZADD', queue, arrival, head)
    redis.call('ZADD', leases, lease_end, head)
    keep_alive(queue, tonumber(lease_end) - now)
    keep_alive(leases, tonumber(lease_end) - now)
    wake(prefix, head)
    return 'woken'
  end
  redis.call('SET', key, head, 'PX', fmt(lease))
  tell_after_grant(prefix, head, fmt(lease), after, fence)
  return 'granted'
end

-- Ends the exclusive (string) hold at `key` and hands it to the next in the queue (a fair
-- waiter or a writer) if there is one, else wakes every waiter on `channel` (mutex
-- waiters, readers; none for the fair mutex, whose waiters all queue). A grant overwrites
-- the key: it is deleted only when nobody was handed it.
local function release_exclusive(key, fence_key, queue, leases, prefix, channel)
  local handed = hand_off_string(key, fence_key, queue, leases, prefix, now_ms())
  if handed ~= 'granted' then
    redis.call('DEL', key)
  end
  if not handed and channel then
    notify(channel, 'all')
  end
end
