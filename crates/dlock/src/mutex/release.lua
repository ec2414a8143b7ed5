-- Deletes the lock only if it still holds our token, then wakes waiters.
-- KEYS[1] lock key; ARGV[1] token; ARGV[2] release channel
-- Returns 1 released, 0 not ours (expired or taken: nothing touched), -1 not a string key.
local current = redis.pcall('GET', KEYS[1])
if type(current) == 'table' and current.err then
  return -1
end
if current ~= ARGV[1] then
  return 0
end
redis.call('DEL', KEYS[1])
redis.call('PUBLISH', ARGV[2], KEYS[1])
return 1
