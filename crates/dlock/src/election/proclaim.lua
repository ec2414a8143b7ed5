-- Records the leader's value while its hold is held, and tells observers.
-- KEYS[1] lock key; KEYS[2] the leader record (a hash: value, term, token)
-- ARGV[1] token; ARGV[2] value; ARGV[3] term; ARGV[4] the observers' channel
-- Returns 1 recorded, 0 not held (nothing written). Safe to run twice: the same fields.
local holder = redis.pcall('GET', KEYS[1])
if type(holder) == 'table' and holder.err then
  if string.sub(holder.err, 1, 9) == 'WRONGTYPE' then
    return 0 -- another kind holds the name: not our hold
  end
  return redis.error_reply(holder.err)
end
if holder ~= ARGV[1] then
  return 0
end
redis.call('HSET', KEYS[2], 'value', ARGV[2], 'term', ARGV[3], 'token', ARGV[1])
-- A refused PUBLISH (ACL) only costs observers a wait until their next look.
redis.pcall('PUBLISH', ARGV[4], 'all')
return 1
