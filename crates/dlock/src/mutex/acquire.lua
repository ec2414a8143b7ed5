-- The mutex's slow path: run when the fast path's `SET key token NX PX lease` found the key
-- taken (see mod.rs), and as the whole attempt when the fence is drawn at grant. It tells
-- our own earlier grant (a resend whose first reply was lost), another holder and a key of
-- another kind apart. Bare and unwrapped (no prelude, not under `answer`): with the fence
-- drawn at grant it runs once per acquire, so a free lock costs the fenced-grant floor's
-- three commands (SET NX PX, TIME, the fence's SET .. GET), and every refusal is caught
-- and worded here (nothing in it raises).
-- KEYS[1] lock key (a string holding the owner's token, with a PX expiry)
-- KEYS[2] fencing counter (never expires, only grows; see fencing.lua)
-- ARGV[1] token, ARGV[2] lease in milliseconds, ARGV[3] '1' to draw the fence with the grant,
-- ARGV[4] '1' to tell whether the fence came from the clock floor (Redlock)
-- Returns {1}          granted without a fence (drawn later, on first read: see fence.lua)
--         fence        granted with its fence, the bare number (a reply table costs the
--                      server more than any command here: docs/decisions.md); {1, fence,
--                      clock} with ARGV[4]: clock is 1 when the fence is the server's clock,
--                      not the counter + 1
--                      Granted also when the key already holds our token (a resent
--                      acquire): the lease restarts as the first grant did, and the fence
--                      is the last one drawn (no other grant can have drawn since; its
--                      origin is not known then: clock 0)
--         {0, pttl}    held by another token (pttl -1: the key has no expiry)
--         {-1}         the lock key holds another type; {-2} the counter cannot count (not
--                      an integer, or at 2^53) (both named by the caller; nothing granted)
replicate_effects() -- the fence is written after TIME
local eager = ARGV[3] == '1'
local tell = ARGV[4] == '1'
if eager then
  -- Free is the common case: taken first, then its fence drawn (nothing runs between the
  -- two), and given back when no fence could be drawn, so nothing is granted then.
  -- (Checks written out on this path, as in release.lua: a Lua call costs.)
  local taken = redis.pcall('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2])
  if taken and taken.err then -- false: not set; {ok = 'OK'}: set
    return worded(taken.err)
  elseif taken then
    local fence, outcome = draw_fence(KEYS[2])
    if fence then
      if tell then
        return {1, fence, outcome and 1 or 0}
      end
      return fence
    end
    -- Given back. When an ACL refuses the DEL, the SET that just took the key cannot be
    -- refused (same command, same key, after the script's first write): it ends the hold
    -- within a millisecond instead, so an error never leaves the key held.
    local undone = redis.pcall('DEL', KEYS[1])
    if type(undone) == 'table' then
      redis.pcall('SET', KEYS[1], ARGV[1], 'XX', 'PX', 1)
    end
    if refused(outcome) then
      return worded(outcome.err)
    end
    return {-2}
  end
  -- Not set: the key exists (SET NX does not look at its type), so the GET below finds it.
end
local current = redis.pcall('GET', KEYS[1])
if wrong_type(current) then
  return {-1}
elseif refused(current) then
  return worded(current.err)
end
if current == ARGV[1] then
  local extended = redis.pcall('PEXPIRE', KEYS[1], ARGV[2])
  if refused(extended) then
    return worded(extended.err)
  elseif not eager then
    return {1}
  end
  local last, problem = fence_counter(KEYS[2])
  if refused(problem) then
    return worded(problem.err)
  elseif not last or last == 0 then
    return {-2}
  end
  if tell then
    return {1, last, 0}
  end
  return last
end
if current then
  local pttl = redis.pcall('PTTL', KEYS[1])
  if refused(pttl) then
    return worded(pttl.err)
  end
  return {0, pttl}
elseif eager then
  -- Cannot happen (the SET NX above found the key, and nothing ran since); never a grant
  -- without its fence: busy, try again at once.
  return {0, 0}
end
-- Free again (the fast path's SET NX found it taken, and its hold has lapsed since).
local set = redis.pcall('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
if refused(set) then
  return worded(set.err)
end
return {1}
