-- Releases the write lock if it still holds our token. Wakes the next waiting writer if
-- there is one, otherwise every waiting reader (one broadcast).
-- ARGV[1] token, ARGV[2] writer wake prefix, ARGV[3] readers' channel
-- Returns 1 released, 0 not ours (untouched), -1 wrong type.
local current = writer_of(KEYS[1])
if current == nil then
  return -1
end
if current ~= ARGV[1] then
  return 0
end
redis.call('DEL', KEYS[1])
queue_purge(KEYS[5], KEYS[6], now_ms())
local head = queue_head(KEYS[5])
if head then
  wake(ARGV[2], head)
else
  redis.call('PUBLISH', ARGV[3], KEYS[1])
end
return 1
