-- Releases the fair mutex if it still holds our token and wakes only the next waiter.
-- KEYS[1] lock key, KEYS[2] queue, KEYS[3] waiter leases
-- ARGV[1] token, ARGV[2] wake channel prefix
-- Returns 1 released, 0 not ours (untouched).
if token_at(KEYS[1]) ~= ARGV[1] then
  return 0
end
redis.call('DEL', KEYS[1])
queue_purge(KEYS[2], KEYS[3], now_ms())
wake(ARGV[2], queue_head(KEYS[2]))
return 1
