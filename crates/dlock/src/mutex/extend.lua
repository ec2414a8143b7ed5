-- Resets the lease to ARGV[2] ms only if the lock still holds our token.
-- KEYS[1] lock key; ARGV[1] token; ARGV[2] lease in milliseconds
-- Returns 1 extended, 0 not ours (expired or taken: nothing touched), -1 not a string key.
local current = redis.pcall('GET', KEYS[1])
if type(current) == 'table' and current.err then
  return -1
end
if current ~= ARGV[1] then
  return 0
end
redis.call('PEXPIRE', KEYS[1], ARGV[2])
return 1
