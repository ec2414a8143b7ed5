-- Draws the fencing token of a plain mutex hold, which is granted without one (the fast
-- path is a bare SET NX), and only while that hold is still held: so it is larger than
-- every fence an earlier holder drew (while it held) and smaller than every later
-- holder's. Bare (no prelude): a caller that reads every fence runs this once per hold.
-- The drawn fence is recorded with the token (for the rest of the lease), so a resend
-- whose first reply was lost answers the same fence and draws none.
-- KEYS[1] lock key; KEYS[2] fencing counter; KEYS[3] the record of the last lazily drawn
-- fence ('<token>|<fence>'); ARGV[1] token
-- Returns the fence; 0 when the hold is no longer held (nothing drawn; also when another
-- kind holds the key now); -2 when the counter cannot count (named by the caller).
local not_ours = unless_held(KEYS[1], ARGV[1]) -- expired, taken, another kind, refused
if not_ours then
  return not_ours
end
local drawn = recorded_fence(KEYS[3], ARGV[1])
if drawn then
  return drawn
end
local fence, cannot = counted(draw_fence(KEYS[2]))
if cannot then
  return cannot
end
local pttl = redis.call('PTTL', KEYS[1])
if pttl > 0 then
  redis.call('SET', KEYS[3], ARGV[1] .. '|' .. string.format('%.0f', fence), 'PX', pttl)
end
return fence
