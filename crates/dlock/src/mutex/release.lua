-- Deletes the lock only if it still holds our token, then wakes one waiter per client.
-- Bare (no prelude): this runs once per hold, so it is kept to the raw compare-and-delete
-- plus the notification.
-- KEYS[1] lock key; ARGV[1] token; ARGV[2] release channel
-- Returns 1 released, 0 not ours (expired or taken: nothing touched), -1 the key holds
-- another type (a hash of another kind: named by the caller).
local current = redis.pcall('GET', KEYS[1])
if wrong_type(current) then
  return -1
elseif refused(current) then
  return redis.error_reply(current.err)
elseif current ~= ARGV[1] then
  return 0
end
redis.call('DEL', KEYS[1])
-- A refused PUBLISH (ACL) only costs waiters a poll: ignored, as in the prelude's notify.
redis.pcall('PUBLISH', ARGV[2], 'one')
return 1
