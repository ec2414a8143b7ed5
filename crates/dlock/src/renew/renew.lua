-- Extends many leases in one call, each only if its owner still holds it.
-- KEYS[i]        lock key
-- ARGV[3i-2]     how the owner is stored: 's' the key is a string holding the token,
--                'h' the key is a hash whose 'owner' field holds the token
-- ARGV[3i-1]     token
-- ARGV[3i]       lease in milliseconds
-- Returns one integer per key: 1 extended, 0 no longer ours (untouched), -1 wrong type.
local results = {}
for i, key in ipairs(KEYS) do
  local kind, token, lease = ARGV[3 * i - 2], ARGV[3 * i - 1], ARGV[3 * i]
  local current
  if kind == 'h' then
    current = redis.pcall('HGET', key, 'owner')
  else
    current = redis.pcall('GET', key)
  end
  if type(current) == 'table' and current.err then
    results[i] = -1
  elseif current == token then
    redis.call('PEXPIRE', key, lease)
    results[i] = 1
  else
    results[i] = 0
  end
end
return results
