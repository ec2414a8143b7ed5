-- Gives back one read hold. When the last hold leaves, the write lock is handed to the
-- first waiting writer (queue.lua).
-- ARGV[1] hold token, ARGV[2] writer wake prefix, ARGV[3] the owner (its count is read with
-- the hold; the hold's own entry names its owner, which decides)
-- Returns 1 released, 0 not held (its lease had ended, or unknown: nothing else touched).
local state, got = rw_read(KEYS[1], {'h:' .. ARGV[1], ENDS, 'o:' .. (ARGV[3] or '')})
if state ~= 'read' then
  return 0
end
local now = now_ms()
local released, ended, indexed = 0, nil, nil
if got[1] then
  local _, owner = entry_parse(got[1])
  ended, indexed = entry_remove(KEYS[1], KEYS[5], ARGV[1], got[1], function()
    -- The owner's last hold takes its count and fence with it, in the same HDEL, when
    -- the hold's entry names the owner the caller named and its count, read above, says 1
    -- (one command fewer than counting down); anything else counts down as before.
    if owner == ARGV[3] and got[3] == '1'
        or redis.call('HINCRBY', KEYS[1], 'o:' .. owner, -1) <= 0 then
      return {'o:' .. owner, 'f:' .. owner}
    end
    return {}
  end)
  if ended > now then
    released = 1
  end
end
local live, _, stale = purge_reads(KEYS[1], now, indexed)
if live then
  if ended then
    local latest = got[2]
    if stale then
      latest = redis.call('HGET', KEYS[1], ENDS) -- the purge rebuilt what was read
    end
    entries_shrink(KEYS[1], KEYS[5], ended, latest)
  end
elseif redis.call('ZCARD', KEYS[3]) > 0 then
  hand_off_string(KEYS[1], KEYS[2], KEYS[3], KEYS[4], ARGV[2], now)
end
return released
