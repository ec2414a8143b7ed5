-- Gives a permit back if its lease is still valid, and wakes only the next waiter.
-- KEYS[1] permits hash, KEYS[2] queue, KEYS[3] waiter leases, KEYS[4] expiry index
-- ARGV[1] token, ARGV[2] wake prefix
-- Returns 1 released, 0 not held (its lease had ended, or unknown).
local got = permits_read(KEYS[1], {'h:' .. ARGV[1], ENDS})
if not got or not got[1] then
  return 0
end
local now = now_ms()
local ended = entry_remove(KEYS[1], KEYS[4], ARGV[1], got[1])
if entries_purge(KEYS[1], KEYS[4], now, nil) then
  entries_shrink(KEYS[1], KEYS[4], ended, got[2])
end
if ended <= now then
  return 0 -- its lease had ended: it was no longer ours to give back
end
queue_purge(KEYS[2], KEYS[3], now)
wake(ARGV[2], queue_head(KEYS[2]))
return 1
