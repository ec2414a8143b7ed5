-- Grants the reentrant mutex to an owner, or re-enters it for the same owner.
-- KEYS[1] lock key: a hash {owner = owner id, count = holds, fence = fence of the outermost
--         grant, request = id of the last acquire request}, with a PX expiry
-- KEYS[2] fencing counter (never expires, only grows)
-- ARGV[1] owner id, ARGV[2] lease in milliseconds, ARGV[3] request id
-- Returns {1, fence, count}  granted (count = holds now); a resent request (same request
--                            id) is answered again without counting twice
--         {0, pttl}          held by another owner
--         {-1, n}            KEYS[n] holds a value that is not ours to interpret
local owner = redis.pcall('HGET', KEYS[1], 'owner')
if type(owner) == 'table' and owner.err then
  return {-1, 1}
end
if owner == false then
  if redis.call('EXISTS', KEYS[1]) == 1 then
    return {-1, 1} -- a hash, but not one of ours
  end
  local fence = redis.pcall('INCR', KEYS[2])
  if type(fence) == 'table' and fence.err then
    return {-1, 2}
  end
  redis.call('HSET', KEYS[1], 'owner', ARGV[1], 'count', 1, 'fence', fence, 'request', ARGV[3])
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return {1, fence, 1}
end
if owner ~= ARGV[1] then
  return {0, redis.call('PTTL', KEYS[1])}
end
local count
if redis.call('HGET', KEYS[1], 'request') == ARGV[3] then
  count = tonumber(redis.call('HGET', KEYS[1], 'count'))
else
  count = redis.call('HINCRBY', KEYS[1], 'count', 1)
  redis.call('HSET', KEYS[1], 'request', ARGV[3])
end
-- Re-entry never shortens the lease an outer hold already has.
if redis.call('PTTL', KEYS[1]) < tonumber(ARGV[2]) then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return {1, tonumber(redis.call('HGET', KEYS[1], 'fence')), count}
