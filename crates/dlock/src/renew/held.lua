-- Whether a hold is still held. KEYS[1] lock key; ARGV[1] kind ('s', 'r', 'e'; see
-- holds.lua); ARGV[2] token. Returns 1 held, 0 not held.
if hold_state(ARGV[1], KEYS[1], ARGV[2], now_ms()) then
  return 1
end
return 0
