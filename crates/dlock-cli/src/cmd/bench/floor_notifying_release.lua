-- The notifying release floor, of `dlock bench` (not a dlock script): the raw
-- compare-and-delete, then one message on the lock's channel, as every release that wakes
-- its waiters (instead of leaving them to poll) has to send, whoever listens. No type
-- checks, no refusal words.
-- KEYS[1] lock key; ARGV[1] token. The channel is the key's name with ':released' (in the
-- key's slot on a cluster, where the bench sends SPUBLISH).
-- Returns 1 released, 0 not held by ARGV[1].
if redis.call('GET', KEYS[1]) ~= ARGV[1] then
  return 0
end
redis.call('DEL', KEYS[1])
redis.call('PUBLISH', KEYS[1] .. ':released', 'one')
return 1
