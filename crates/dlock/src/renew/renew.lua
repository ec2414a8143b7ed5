-- Extends many leases in one call, each only if its owner still holds it.
-- KEYS[i]        lock key
-- ARGV[3i-2]     how the owner is stored:
--                's' the key is a string holding the token,
--                'h' the key is a hash whose 'owner' field holds the token,
--                'z' the key is a sorted set with the token as member and the end of its
--                    lease (server ms) as score (semaphore permits, readers)
-- ARGV[3i-1]     token
-- ARGV[3i]       lease in milliseconds
-- Returns one integer per key: 1 extended, 0 no longer ours (untouched), -1 wrong type.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local results = {}
for i, key in ipairs(KEYS) do
  local kind, token, lease = ARGV[3 * i - 2], ARGV[3 * i - 1], tonumber(ARGV[3 * i])
  if kind == 'z' then
    local score = redis.pcall('ZSCORE', key, token)
    if type(score) == 'table' and score.err then
      results[i] = -1
    elseif score and tonumber(score) > now then
      redis.call('ZADD', key, 'XX', string.format('%.0f', now + lease), token)
      if redis.call('PTTL', key) < lease then
        redis.call('PEXPIRE', key, lease)
      end
      results[i] = 1
    else
      results[i] = 0
    end
  else
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
end
return results
