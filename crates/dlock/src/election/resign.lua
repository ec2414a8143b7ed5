-- Clears the leader record of the hold `token` (if it is still that hold's) and tells
-- observers; the caller then releases the lock.
-- KEYS[1] the leader record; ARGV[1] token; ARGV[2] the observers' channel
-- Returns 1 cleared, 0 the record was another leader's or gone. Safe to run twice.
if redis.call('HGET', KEYS[1], 'token') ~= ARGV[1] then
  return 0
end
redis.call('DEL', KEYS[1])
redis.pcall('PUBLISH', ARGV[2], 'all')
return 1
