-- Gives back one hold of the reentrant mutex; deletes it (and wakes a waiter) at zero.
-- KEYS[1] lock hash; ARGV[1] owner id; ARGV[2] release channel; ARGV[3] hold token (always
-- exact: a resend whose first reply was lost must not give back a second hold)
-- Returns the holds left (>= 0), or -1 when that hold is not held (nothing touched).
if not hash_kind(KEYS[1], 'reentrant') or redis.call('HGET', KEYS[1], 'owner') ~= ARGV[1] then
  return -1
end
local field = 'h:' .. ARGV[3]
if ARGV[3] == '' or redis.call('HDEL', KEYS[1], field) == 0 then
  return -1
end
local count = redis.call('HINCRBY', KEYS[1], 'count', -1)
if count <= 0 then
  redis.call('DEL', KEYS[1])
  notify(ARGV[2], 'one')
  return 0
end
return count
