-- Releases the write lock if it still holds our token. Hands it to the next waiting
-- writer if there is one (queue.lua), otherwise wakes every waiting reader (one
-- broadcast).
-- ARGV[1] token, ARGV[2] writer wake prefix, ARGV[3] readers' channel
-- Returns 1 released, 0 not ours (untouched).
-- The token is read first: a held write lock is a string, so the common case costs one
-- GET (rw_state would first try the hash and then ask the key's TYPE). Anything else at
-- the key is read as rw_state reads it: a read hash is not ours, another type is named.
local current = redis.pcall('GET', KEYS[1])
if type(current) == 'table' and current.err then
  if string.sub(current.err, 1, 9) ~= 'WRONGTYPE' then
    return current
  end
  rw_state(KEYS[1])
  return 0
end
if current ~= ARGV[1] then
  return 0
end
release_exclusive(KEYS[1], KEYS[2], KEYS[3], KEYS[4], ARGV[2], ARGV[3])
return 1
