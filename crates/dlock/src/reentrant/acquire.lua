-- Grants the reentrant mutex to an owner, or re-enters it for the same owner.
-- KEYS[1] lock key: a hash {~kind = 'reentrant', owner = owner id, fence = fence of the
--         outermost grant, count = holds, h:<hold token> = 1 per hold}, with a PX expiry
-- KEYS[2] fencing counter (never expires, only grows)
-- ARGV[1] owner id, ARGV[2] lease in milliseconds, ARGV[3] hold token
-- Returns {1, fence, count}  granted (count = holds now). A resent request (same hold
--                            token) is counted once, and restarts the lease like a grant.
--         {0, pttl}          held by another owner
if not hash_kind(KEYS[1], 'reentrant') then
  local fence = next_fence(KEYS[2])
  redis.call('HSET', KEYS[1], KIND, 'reentrant', 'owner', ARGV[1], 'fence', fence, 'count', 1,
    'h:' .. ARGV[3], 1)
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return {1, fence, 1}
end
if redis.call('HGET', KEYS[1], 'owner') ~= ARGV[1] then
  return {0, redis.call('PTTL', KEYS[1])}
end
local count
if redis.call('HSETNX', KEYS[1], 'h:' .. ARGV[3], 1) == 1 then
  count = redis.call('HINCRBY', KEYS[1], 'count', 1)
else
  count = tonumber(redis.call('HGET', KEYS[1], 'count'))
end
-- Holds share one lease: a grant restarts it, and never shortens what an outer hold has.
keep_alive(KEYS[1], tonumber(ARGV[2]))
return {1, tonumber(redis.call('HGET', KEYS[1], 'fence')), count}
