-- Gives back one hold of the reentrant mutex; deletes it (and wakes waiters) at zero.
-- KEYS[1] lock hash; ARGV[1] owner id; ARGV[2] release channel
-- Returns the holds left (>= 0), -1 when the owner does not hold it (nothing touched),
-- -2 when the key holds a value that is not a dlock hash.
local owner = redis.pcall('HGET', KEYS[1], 'owner')
if type(owner) == 'table' and owner.err then
  return -2
end
if owner ~= ARGV[1] then
  return -1
end
local count = redis.call('HINCRBY', KEYS[1], 'count', -1)
if count <= 0 then
  redis.call('DEL', KEYS[1])
  redis.call('PUBLISH', ARGV[2], KEYS[1])
  return 0
end
return count
