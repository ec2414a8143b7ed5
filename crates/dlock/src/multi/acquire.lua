-- Takes every name of a multi-lock at once, or none (multi/mod.rs): each name's key gets
-- the string hold (the bare token: the format of the mutex, the fair mutex and the write
-- lock, so those holders and this one exclude each other), and each name its own fence.
-- KEYS: four per name: lock key, fencing counter, queue, waiter leases
-- ARGV[1] token, ARGV[2] lease ms; then two per name: release channel, wake channel prefix
-- Returns {1, fence1, ..., fenceN}  every name granted, fences in the order of the names.
--                                   A resend that finds names already its own restarts
--                                   their leases and answers their last fences (no other
--                                   grant of a name can draw while it is held).
--         {0, pttl}                 a name is held by another token: nothing is taken, and
--                                   names this token held (an earlier grant, part of it
--                                   lost) are given back; pttl is the longest lease left
--                                   among the holders (-1: one never expires), so a waiter
--                                   that hears no release sleeps until all could be free.
-- Another kind at a name's key is a DLOCKTYPE error (nothing written).
local names = #KEYS / 4
local token = ARGV[1]
local ours, busy, longest = {}, false, 0
for i = 1, names do
  local key = KEYS[4 * i - 3]
  local current = token_at(key)
  if current == token then
    ours[i] = true
  elseif current then
    busy = true
    local pttl = redis.call('PTTL', key)
    if pttl < 0 or longest < 0 then
      longest = -1
    elseif pttl > longest then
      longest = pttl
    end
  end
end
if busy then
  -- All or nothing: a part of an old grant is not kept while waiting for the rest (two
  -- multi-locks each keeping a part would wait for each other until a lease ran out).
  for i = 1, names do
    if ours[i] then
      release_exclusive(KEYS[4 * i - 3], KEYS[4 * i - 2], KEYS[4 * i - 1], KEYS[4 * i],
        ARGV[2 * i + 2], ARGV[2 * i + 1])
    end
  end
  return {0, longest}
end
-- Every counter is read before anything is written: one that cannot count fails the
-- whole grant with nothing taken.
for i = 1, names do
  last_fence(KEYS[4 * i - 2])
end
local reply = {1}
for i = 1, names do
  local key, fence_key = KEYS[4 * i - 3], KEYS[4 * i - 2]
  if ours[i] then
    redis.call('PEXPIRE', key, ARGV[2])
    reply[i + 1] = last_fence(fence_key)
  else
    reply[i + 1] = next_fence(fence_key)
    redis.call('SET', key, token, 'PX', ARGV[2])
  end
end
return reply
