-- Gives a permit back (all k permits of a weighted one at once) if its lease is still
-- valid, and hands the freed permits to the next waiter (queue.lua) if its weight fits,
-- who is told alone: judged by that waiter's own N (each client enforces its own), as its
-- own attempt would have judged. Strict queue order: a first in line that does not fit
-- is passed by nobody.
-- KEYS[1] permits hash, KEYS[2] queue, KEYS[3] waiter leases, KEYS[4] expiry index,
-- KEYS[5] fencing counter
-- ARGV[1] token, ARGV[2] wake prefix, ARGV[3] N (for a waiter whose token names none)
-- Returns 1 released, 0 not held (its lease had ended, or unknown).
local got = permits_read(KEYS[1], {'h:' .. ARGV[1], ENDS, EXTRA})
if not got or not got[1] then
  return 0
end
local now = now_ms()
local ended, indexed = entry_remove(KEYS[1], KEYS[4], ARGV[1], got[1])
local extra = permits_add_extra(KEYS[1], tonumber(got[3]) or 0, 1 - permit_weight(ARGV[1]))
local held, latest = 0, false
-- An emptied hash is kept until it is known whether a waiter is handed a permit in it,
-- unless its '~extra' still counts weight (the field disagrees with the entries: only the
-- delete clears it).
local live, soonest, stale, kept
live, soonest, stale, extra, kept = permits_purge(KEYS[1], KEYS[4], now, extra, indexed,
  extra <= 0)
if live then
  latest = got[2]
  if stale then
    latest = redis.call('HGET', KEYS[1], ENDS) -- the purge rebuilt what was read
  end
  latest = entries_shrink(KEYS[1], KEYS[4], ended, latest)
  held = redis.call('ZCARD', KEYS[4]) + extra
end
local head, lease, limit, after = queue_next_grant(KEYS[2], KEYS[3], now)
local weight = head and permit_weight(head)
local handed = false
if head and held + weight <= (limit or tonumber(ARGV[3])) then
  local fence = lease and hand_off_fence(KEYS[5])
  if fence then
    -- None left (no latest lease): the grant's entry goes into the emptied hash kept
    -- above (its kind still recorded, its index gone with its last member), or begins a
    -- new hash where the purge deleted both; either way with no stale index to clear, and
    -- its lease sets when both expire.
    local more = not latest and not kept and {KIND, 'semaphore'} or nil
    entry_put(KEYS[1], KEYS[4], head, now + lease, fence, latest, more)
    permits_add_extra(KEYS[1], extra, weight - 1)
    -- Told so; the next in line takes permits still free, or watches the soonest lease.
    permits_granted(KEYS[2], KEYS[3], ARGV[2], head, fence, held + weight,
      tonumber(ARGV[3]), math.min(soonest or (now + lease), now + lease), now, after)
    handed = true
  else
    wake(ARGV[2], head)
  end
end
if kept and not handed then
  redis.call('DEL', KEYS[1], KEYS[4])
end
if ended <= now then
  return 0 -- its lease had ended: it was no longer ours to give back
end
return 1
