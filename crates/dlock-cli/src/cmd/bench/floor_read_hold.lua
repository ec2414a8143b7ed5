-- The read-hold floor's grant, of `dlock bench` (not a dlock script): the least a leased
-- read hold can be recorded in. The hold is a field of a hash at the lock key, as dlock
-- keeps read holds, valued with the end of its lease by the server's clock (so others can
-- tell it lapsed); the hash lives at least as long as that lease. A writer holds the key
-- as a string, so the field's write doubles as the check that no writer holds. No fence,
-- no writer queue, no purge of lapsed holds: dlock's read grant does all three.
-- KEYS[1] lock key; ARGV[1] hold token, ARGV[2] lease in ms
-- Returns 1 granted, 0 refused (a writer holds).
local lease = tonumber(ARGV[2])
local t = redis.call('TIME')
local ends = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000) + lease
local added = redis.pcall('HSET', KEYS[1], ARGV[1], string.format('%.0f', ends))
if type(added) == 'table' and added.err then
  if string.sub(added.err, 1, 9) == 'WRONGTYPE' then
    return 0
  end
  return added
end
if redis.call('PTTL', KEYS[1]) < lease then
  redis.call('PEXPIRE', KEYS[1], lease)
end
return 1
