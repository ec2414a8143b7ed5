-- Gives a permit back if its lease is still valid, and wakes only the next waiter.
-- KEYS[1] permits hash, KEYS[2] queue, KEYS[3] waiter leases, KEYS[4] expiry index
-- ARGV[1] token, ARGV[2] wake prefix
-- Returns 1 released, 0 not held (its lease had ended, or unknown).
if not hash_kind(KEYS[1], 'semaphore') then
  return 0
end
local now = now_ms()
local value = redis.call('HGET', KEYS[1], 'h:' .. ARGV[1])
if not value then
  return 0
end
entry_remove(KEYS[1], KEYS[4], ARGV[1])
if entries_purge(KEYS[1], KEYS[4], now, nil) > 0 then
  entries_settle(KEYS[1], KEYS[4], now)
end
if entry_parse(value) <= now then
  return 0 -- its lease had ended: it was no longer ours to give back
end
queue_purge(KEYS[2], KEYS[3], now)
wake(ARGV[2], queue_head(KEYS[2]))
return 1
