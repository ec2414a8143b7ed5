-- Redlock's second round: raises this node's fencing counter to the fence a quorum's
-- grant chose (the largest counter among the granting nodes), only upward, and only
-- while the hold is still ours here. A later grant's quorum meets every majority, so it
-- meets a node raised here while we held it, and its own fence comes out larger, as long
-- as that node keeps its counter: after a restart without persistence only the clock
-- floor keeps the order (fencing.lua).
-- Bare (no prelude): it runs after nearly every grant on 3+ masters (each node's fence is
-- its own clock, so fewer than a majority drew the largest), and must stay small.
-- Counters and fences stay below 2^53 (fencing.lua), where Lua compares them exactly.
-- KEYS[1] lock key; KEYS[2] fencing counter; ARGV[1] token; ARGV[2] the fence
-- Returns 1 raised (or already that high), 0 the hold is not ours here (nothing touched),
-- -2 the counter cannot count, or the fence is out of range (named by the caller).
local last, cannot = counted(fence_counter(KEYS[2]))
local answer = unless_held(KEYS[1], ARGV[1]) or cannot
if answer then
  return answer
end
local fence = string.match(ARGV[2], '^%d+$') and string.len(ARGV[2]) <= 16 and tonumber(ARGV[2])
if not fence or fence >= FENCE_LIMIT then
  return -2
end
if last < fence then
  redis.call('SET', KEYS[2], ARGV[2])
end
return 1
