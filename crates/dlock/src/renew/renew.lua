-- Extends many leases in one call, each only if its holder still holds it.
-- Per hold i, in order:
-- KEYS           its lock key; for an 'e' hold, its expiry index follows it
-- ARGV[3i-2]     how the hold is stored (see holds.lua): 's', 'r' or 'e'
-- ARGV[3i-1]     the hold's token
-- ARGV[3i]       lease in milliseconds
-- Returns one integer per hold: 1 extended, 0 no longer held (untouched), -1 the key holds
-- another kind of value (the holder cannot be there).
local now = now_ms()
local results = {}
local next_key = 1
for i = 1, #ARGV / 3 do
  local kind, token, lease = ARGV[3 * i - 2], ARGV[3 * i - 1], tonumber(ARGV[3 * i])
  local key, index = KEYS[next_key], nil
  next_key = next_key + 1
  if kind == 'e' then
    index = KEYS[next_key]
    next_key = next_key + 1
  end
  local ok, held = pcall(hold_state, kind, key, token, now)
  if not ok then
    if is_type_error(held) then
      results[i] = -1
    else
      reraise(held)
    end
  elseif held then
    hold_restart(kind, key, index, token, now, lease, held)
    results[i] = 1
  else
    results[i] = 0
  end
end
return results
