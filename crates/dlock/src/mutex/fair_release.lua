-- Releases the fair mutex if it still holds our token and hands it to the next waiter
-- (queue.lua), who is told alone.
-- KEYS[1] lock key, KEYS[2] queue, KEYS[3] waiter leases, KEYS[4] fencing counter
-- ARGV[1] token, ARGV[2] wake channel prefix
-- Returns 1 released, 0 not ours (untouched).
if token_at(KEYS[1]) ~= ARGV[1] then
  return 0
end
release_exclusive(KEYS[1], KEYS[4], KEYS[2], KEYS[3], ARGV[2], nil)
return 1
