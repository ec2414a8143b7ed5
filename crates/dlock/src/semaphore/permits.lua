-- Weighted permits (`Semaphore::lock_many`): a permit worth k > 1 permits is ONE entry
-- (one token, lease and fence) whose token ends in '~w<k>' (permit_weight), and the hash
-- keeps '~extra' = the sum of k - 1 over such entries, so the weight held is the size of
-- the expiry index plus '~extra': O(1), like the count it extends. While every permit
-- weighs 1 the hash has no '~extra' and is exactly what it was before weights.

local EXTRA = '~extra'

-- Adds `delta` to '~extra' (whose value was `extra`, as read), deleting the field at 0 so
-- a semaphore without weighted permits keeps its unweighted format. Returns the new value.
local function permits_add_extra(key, extra, delta)
  if delta == 0 then
    return extra
  end
  extra = extra + delta
  if extra > 0 then
    redis.call('HSET', key, EXTRA, fmt(extra))
  else
    redis.call('HDEL', key, EXTRA)
  end
  return extra
end

-- entries_purge for permits, '~extra' (read as `extra`) kept equal to the weight of the
-- entries left (`indexed`, `keep_emptied` as for entries_purge). Returns whether any is
-- left, the soonest lease end among them, whether values read before are stale, '~extra'
-- now, and whether an emptied hash was kept (its '~extra' is gone: the caller's removal
-- wrote the weight left, none).
local function permits_purge(key, index, now, extra, indexed, keep_emptied)
  local gone = 0
  local live, soonest, stale, kept = entries_purge(key, index, now, function(_, token)
    gone = gone + permit_weight(token) - 1
  end, indexed, keep_emptied)
  if not live then
    return false, nil, true, 0, kept -- deleted unless kept, '~extra' with them
  end
  return true, soonest, stale, permits_add_extra(key, extra, -gone)
end

-- Whether `token`, taking `weight` permits, is granted while `free` are free: in strict
-- queue order, so only if it fits together with every waiter ahead of it (a large request
-- first in line is not passed by small ones behind it). Each waiter weighs at least 1, so
-- at most `free` waiters ahead are ever read, and none when it is first.
local function permits_fit(queue, token, weight, free)
  local rank = queue_rank(queue, token)
  local need = rank + weight
  if need > free then
    return false
  end
  if rank > 0 then
    for _, ahead in ipairs(redis.call('ZRANGE', queue, 0, rank - 1)) do
      need = need + permit_weight(ahead) - 1
      if need > free then
        return false
      end
    end
  end
  return true
end

-- After `waiter` was granted permits (its place left; `fence` when a release handed them
-- to it), with `held` permits now taken and `soonest` the first permit lease to end:
-- tells it so, and the next in line what it needs to know. The next in line looks again
-- ('one') when its request fits beside those held; otherwise it is told to watch the
-- soonest lease ('watch <ms>'), and sleeps until then unless a release hands it permits
-- first: an attempt of its own would only learn that nothing is free. A token of a dlock
-- that names no ttl (waiter_wants) is always told to look. `limit`: N for a next waiter
-- whose token names none. `next_waiter`: who is next once `waiter` left, when the caller
-- read it already (false: nobody); nil to read it here.
local function permits_granted(queue, leases, prefix, waiter, fence, held, limit, soonest, now,
                               next_waiter)
  queue_leave(queue, leases, waiter)
  if next_waiter == nil then
    next_waiter = queue_head(queue)
  end
  local watch_ms = nil
  if next_waiter then
    local ttl, its_limit = waiter_wants(next_waiter)
    if ttl and held + permit_weight(next_waiter) > (its_limit or limit) then
      watch_ms = fmt(math.max(soonest - now, 0))
    end
  end
  tell_after_grant(prefix, waiter, watch_ms, next_waiter, fence)
end
