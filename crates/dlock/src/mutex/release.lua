-- Deletes the lock only if it still holds our token, then wakes one waiter per client.
-- KEYS[1] lock key; ARGV[1] token; ARGV[2] release channel
-- Returns 1 released, 0 not ours (expired or taken: nothing touched).
if token_at(KEYS[1]) ~= ARGV[1] then
  return 0
end
redis.call('DEL', KEYS[1])
notify(ARGV[2], 'one')
return 1
