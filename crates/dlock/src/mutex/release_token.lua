-- Releases a string hold by its token, whatever kind took it (a mutex, a fair mutex and a
-- write lock share the format), and hands the lock to whoever waits for the name, whatever kind they
-- wait as: the head of the queue if there is one (fair waiters and writers queue there),
-- else every waiter on the release channel (mutex waiters and readers). This is the path
-- of a release by token from outside the holder (`dlock release NAME TOKEN`), which need
-- not know the kind; a guard's own release is its kind's script.
-- KEYS[1] lock key, KEYS[2] queue, KEYS[3] waiter leases, KEYS[4] fencing counter
-- ARGV[1] token, ARGV[2] release channel, ARGV[3] wake channel prefix
-- Returns 1 released, 0 not ours (untouched); another kind at the key is a DLOCKTYPE error.
if token_at(KEYS[1]) ~= ARGV[1] then
  return 0
end
release_exclusive(KEYS[1], KEYS[4], KEYS[2], KEYS[3], ARGV[3], ARGV[2])
return 1
