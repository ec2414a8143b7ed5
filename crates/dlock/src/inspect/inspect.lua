-- Describes a lock without changing anything.
-- KEYS[1] lock key, KEYS[2] fencing counter, KEYS[3] waiter queue
-- Returns strings: {kind, pttl, last fence, queued, then per holder: token, remaining
-- ms (-1 unknown), owner, holds}
-- kind: 'free', 'string' (mutex, fair mutex, write lock, or another client's lock),
-- 'reentrant', 'read', 'semaphore', or the Redis type of a foreign value.
local found = redis.call('TYPE', KEYS[1]).ok
local pttl = redis.call('PTTL', KEYS[1])
local fence = redis.pcall('GET', KEYS[2])
if type(fence) ~= 'string' then
  fence = '0'
end
local queued = redis.pcall('ZCARD', KEYS[3])
if type(queued) ~= 'number' then
  queued = 0
end
local out = {'free', tostring(pttl), fence, tostring(queued)}
if found == 'none' then
  return out
end
if found == 'string' then
  out[1] = 'string'
  for _, v in ipairs({redis.call('GET', KEYS[1]), tostring(pttl), '', '1'}) do
    table.insert(out, v)
  end
  return out
end
if found ~= 'hash' then
  out[1] = found
  return out
end
local kind = redis.call('HGET', KEYS[1], KIND) or 'hash'
out[1] = kind
local now = now_ms()
local fields = redis.call('HGETALL', KEYS[1])
local owner = redis.call('HGET', KEYS[1], 'owner') or ''
for i = 1, #fields, 2 do
  if string.sub(fields[i], 1, 2) == 'h:' then
    local token = string.sub(fields[i], 3)
    if kind == 'reentrant' then
      for _, v in ipairs({token, tostring(pttl), owner, '1'}) do
        table.insert(out, v)
      end
    else
      local ends, data = entry_parse(fields[i + 1])
      if ends and ends > now then
        local who = ''
        if kind == 'read' then
          who = data
        end
        for _, v in ipairs({token, fmt(ends - now), who, '1'}) do
          table.insert(out, v)
        end
      end
    end
  end
end
return out
