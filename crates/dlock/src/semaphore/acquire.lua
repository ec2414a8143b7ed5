-- Takes one permit, or one worth k permits (a token ending in '~w<k>': permits.lua). Every
-- permit has its own token, lease and fencing token.
-- KEYS[1] the lock key: a hash {~kind = 'semaphore', ~ends = the latest lease end,
--         h:<permit token> = '<end ms>|<fence>', ~extra = the weight held beyond one per
--         permit, only while a permit weighs more than 1} (entries.lua, permits.lua),
--         expiring with its latest lease
-- KEYS[2] fencing counter, KEYS[3] queue, KEYS[4] waiter leases, KEYS[5] the permits'
-- expiry index (entries.lua)
-- ARGV[1] token, ARGV[2] lease ms, ARGV[3] N, ARGV[4] waiter lease ms, ARGV[5] wake prefix,
-- ARGV[6] '1' to take (or refresh) a place in the queue when not granted, '0' for a single
-- attempt that leaves no trace
-- Returns {1, fence}        granted (a resend by the holder restarts the permit's lease)
--         {0, ms, 0}        first in line; the soonest permit lease ends in ms
--         {0, -3, rank}     behind others (queued: woken when first in line)
local now, lease = now_ms(), tonumber(ARGV[2])
local weight = permit_weight(ARGV[1])
local fields = {'h:' .. ARGV[1], ENDS, EXTRA}
local got = permits_read(KEYS[1], fields)
local held, soonest, extra = 0, nil, 0
if got then
  -- Reclaims permits whose holders stopped renewing.
  local live, stale
  live, soonest, stale, extra = permits_purge(KEYS[1], KEYS[5], now, tonumber(got[3]) or 0)
  if live then
    if stale then
      got = redis.call('HMGET', KEYS[1], unpack(fields))
    end
    if got[1] then
      local _, fence = entry_parse(got[1])
      entry_put(KEYS[1], KEYS[5], ARGV[1], now + lease, fence, got[2])
      return {1, tonumber(fence)}
    end
    held = redis.call('ZCARD', KEYS[5]) + extra
  end
end
queue_purge(KEYS[3], KEYS[4], now)
if permits_fit(KEYS[3], ARGV[1], weight, tonumber(ARGV[3]) - held) then
  local fence = next_fence(KEYS[2])
  local latest, more = false, {KIND, 'semaphore'}
  if held > 0 then
    latest, more = got[2], nil
  else
    entries_begin(KEYS[5])
  end
  entry_put(KEYS[1], KEYS[5], ARGV[1], now + lease, fence, latest, more)
  permits_add_extra(KEYS[1], extra, weight - 1)
  -- The next in line takes a permit still free, or else now watches the soonest lease
  -- (queued behind us it slept until woken: were a holder to crash, no release would
  -- wake it before its place's refresh, long after the lease had freed the permit).
  permits_granted(KEYS[3], KEYS[4], ARGV[5], ARGV[1], nil, held + weight,
    tonumber(ARGV[3]), math.min(soonest or (now + lease), now + lease), now)
  return {1, fence}
end
local rank = queue_place(KEYS[3], KEYS[4], ARGV[1], now, ARGV[6], ARGV[4])
if rank == 0 and soonest then
  return {0, math.max(soonest - now, 0), 0}
end
return {0, -3, rank}
