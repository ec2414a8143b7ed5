-- Records the leader's value while its hold is held, and tells observers.
-- KEYS[1] lock key; KEYS[2] the leader record (a hash: value, term, token)
-- ARGV[1] token; ARGV[2] value; ARGV[3] term; ARGV[4] the observers' channel
-- Returns 1 recorded, 0 not held (nothing written). Safe to run twice: the same fields.
local not_held = unless_held(KEYS[1], ARGV[1]) -- 0 also when another kind holds the name
if not_held then
  return not_held
end
redis.call('HSET', KEYS[2], 'value', ARGV[2], 'term', ARGV[3], 'token', ARGV[1])
-- A refused PUBLISH (ACL) only costs observers a wait until their next look.
redis.pcall('PUBLISH', ARGV[4], 'all')
return 1
