-- Deletes the lock only if it still holds our token, then wakes one waiter per client.
-- Bare and unwrapped (no prelude, not under `answer`): this runs once per hold, so it is
-- kept to the raw compare-and-delete plus the notification, and catches each refusal
-- itself (nothing in it raises).
-- KEYS[1] lock key; ARGV[1] token; ARGV[2] release channel
-- Returns 1 released, 0 not ours (expired or taken: nothing touched), -1 the key holds
-- another type (a hash of another kind: named by the caller).
-- The checks are written out, not the helpers of bare.lua called: a Lua call per check
-- costs this script about a sixth of its server time (docs/decisions.md).
local current = redis.pcall('GET', KEYS[1])
if type(current) == 'table' then -- only a refusal is a table here
  if string.sub(current.err, 1, 9) == 'WRONGTYPE' then
    return -1
  end
  return worded(current.err)
elseif current ~= ARGV[1] then
  return 0
end
local deleted = redis.pcall('DEL', KEYS[1])
if type(deleted) == 'table' then
  return worded(deleted.err)
end
-- A refused PUBLISH (ACL) only costs waiters a poll: ignored, as in the prelude's notify.
redis.pcall('PUBLISH', ARGV[2], 'one')
return 1
