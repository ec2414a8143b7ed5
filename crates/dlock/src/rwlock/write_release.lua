-- Releases the write lock if it still holds our token. Hands it to the next waiting
-- writer if there is one (queue.lua), otherwise wakes every waiting reader (one
-- broadcast).
-- ARGV[1] token, ARGV[2] writer wake prefix, ARGV[3] readers' channel
-- Returns 1 released, 0 not ours (untouched).
if rw_state(KEYS[1]) ~= 'write' or redis.call('GET', KEYS[1]) ~= ARGV[1] then
  return 0
end
release_exclusive(KEYS[1], KEYS[2], KEYS[3], KEYS[4], ARGV[2], ARGV[3])
return 1
