-- Lists the live leased entries of a dlock hash of kind ARGV[1] at KEYS[1] (read holds,
-- semaphore permits) as {token, data, token, data, ...}, without changing anything.
-- A missing key has none; so has a string when ARGV[2] == '1' (a write-held read-write
-- lock has no readers).
local found = redis.call('TYPE', KEYS[1]).ok
if found == 'none' or (found == 'string' and ARGV[2] == '1') then
  return {}
end
if found ~= 'hash' or redis.call('HGET', KEYS[1], KIND) ~= ARGV[1] then
  error(type_error(KEYS[1], ARGV[1]))
end
local now = now_ms()
local live = {}
local fields = redis.call('HGETALL', KEYS[1])
for i = 1, #fields, 2 do
  if string.sub(fields[i], 1, 2) == 'h:' then
    local ends, data = entry_parse(fields[i + 1])
    if ends > now then
      table.insert(live, string.sub(fields[i], 3))
      table.insert(live, data)
    end
  end
end
return live
