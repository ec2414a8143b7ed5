-- Whether a hold is still held. KEYS[1] lock key; ARGV[1] kind ('s', 'r', 'e'; see
-- holds.lua); ARGV[2] token. Returns 1 held, 0 not held (also when another kind holds
-- the key now).
local ok, held = pcall(hold_state, ARGV[1], KEYS[1], ARGV[2], now_ms())
if not ok then
  if is_type_error(held) then
    return 0 -- another kind holds the key now: not us
  end
  reraise(held)
end
if held then
  return 1
end
return 0
