-- Gives back every name of a multi-lock that the token holds, each as a string hold's
-- release does (release_exclusive): the first fair waiter or writer in line is handed
-- the name, else the name's release channel wakes its waiters.
-- KEYS: four per name: lock key, fencing counter, queue, waiter leases
-- ARGV[1] token; then two per name: release channel, wake channel prefix
-- Returns how many names were the token's (and are released now); a name held by
-- another token, or by another kind, is left untouched.
local released = 0
for i = 1, #KEYS / 4 do
  local key = KEYS[4 * i - 3]
  local current = redis.pcall('GET', key)
  if type(current) == 'table' and current.err and string.sub(current.err, 1, 9) ~= 'WRONGTYPE' then
    return redis.error_reply(current.err)
  end
  if current == ARGV[1] then
    release_exclusive(key, KEYS[4 * i - 2], KEYS[4 * i - 1], KEYS[4 * i], ARGV[2 * i + 1], ARGV[2 * i])
    released = released + 1
  end
end
return released
