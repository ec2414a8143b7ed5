-- Releases the fair mutex if it still holds our token and wakes only the next waiter.
-- KEYS[1] lock key, KEYS[2] queue, KEYS[3] waiter leases
-- ARGV[1] token, ARGV[2] wake channel prefix
-- Returns 1 released, 0 not ours (untouched), -1 not a string key.
local current = redis.pcall('GET', KEYS[1])
if type(current) == 'table' and current.err then
  return -1
end
if current ~= ARGV[1] then
  return 0
end
redis.call('DEL', KEYS[1])
queue_purge(KEYS[2], KEYS[3], now_ms())
wake(ARGV[2], queue_head(KEYS[2]))
return 1
