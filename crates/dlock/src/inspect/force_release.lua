-- An operator's forced release: deletes whatever dlock lock (or another client's string
-- lock) holds the name, whoever holds it, and draws a fencing token, so storage that
-- checks fences refuses the evicted holder's writes from now on. Waiters are woken.
-- Each call carries a request id, and its outcome is kept for a minute under it: a resend
-- whose first reply was lost answers that outcome and evicts nobody (the first run may
-- have let a waiter in, who must not be evicted by the same operator call). The record
-- keeps the last RECORDS calls, not only the last one: another operator's call between a
-- first send and its resend must not make the resend evict again (dlock-model's
-- forced-release model found that).
-- KEYS[1] lock key, KEYS[2] fencing counter, KEYS[3] queue, KEYS[4] waiter leases,
-- KEYS[5] the record of the last forced releases ('<request id>|<fence>' lines, newest
-- first), KEYS[6] the expiry index of read holds or permits (entries.lua)
-- ARGV[1] release channel, ARGV[2] wake channel prefix, ARGV[3] request id, ARGV[4] the
-- channel of an election's observers (told that its leader is gone)
-- Returns the new fencing token, or 0 when nothing held the name.
local RECORDS = 16
local record = redis.pcall('GET', KEYS[5])
local lines = {}
if type(record) == 'string' then
  for line in string.gmatch(record, '[^\n]+') do
    local id, fence = string.match(line, '^(.*)|(%d+)$')
    if id == ARGV[3] then
      return tonumber(fence)
    end
    if id and #lines < RECORDS - 1 then
      lines[#lines + 1] = line
    end
  end
end
local function done(fence)
  table.insert(lines, 1, ARGV[3] .. '|' .. fmt(fence))
  redis.call('SET', KEYS[5], table.concat(lines, '\n'), 'PX', 60000)
  return fence
end
local found = redis.call('TYPE', KEYS[1]).ok
if found == 'none' then
  return done(0)
end
if found ~= 'string' and not (found == 'hash' and redis.call('HGET', KEYS[1], KIND)) then
  error(type_error(KEYS[1], 'lock'))
end
local fence = next_fence(KEYS[2])
redis.call('DEL', KEYS[1], KEYS[6])
notify(ARGV[1], 'all')
notify(ARGV[4], 'all')
queue_purge(KEYS[3], KEYS[4], now_ms())
wake(ARGV[2], queue_head(KEYS[3]))
return done(fence)
