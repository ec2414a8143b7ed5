-- Grants a read hold: when no writer holds and no writer waits, or when the owner already
-- reads (re-entry must not queue behind a writer that waits for this very reader).
-- ARGV[1] owner id, ARGV[2] lease ms, ARGV[3] hold token
-- Returns {1, fence, holds}  granted (a resent request restarts its lease, counted once)
--         {0, ms}            busy; ms until the blocking lease ends (-1 unknown)
local owner, lease, hold = ARGV[1], tonumber(ARGV[2]), ARGV[3]
local fields = {'h:' .. hold, 'o:' .. owner, 'f:' .. owner, ENDS}
local state, got = rw_read(KEYS[1], fields)
local now = now_ms()
-- While writers queue, a reader re-checks when the first one's waiter lease would end (a
-- crashed writer must not hold readers back longer than that).
local function writers_wait_until()
  if redis.call('ZCARD', KEYS[3]) == 0 then
    return nil
  end
  queue_purge(KEYS[3], KEYS[4], now)
  local head = queue_head(KEYS[3])
  if head then
    return tonumber(redis.call('ZSCORE', KEYS[4], head) or now)
  end
  return nil
end
if state == 'write' then
  local pttl = redis.call('PTTL', KEYS[1])
  local writer_mark = writers_wait_until()
  if writer_mark and (pttl < 0 or writer_mark - now < pttl) then
    pttl = math.max(writer_mark - now, 0)
  end
  return {0, pttl}
end
local live = false
if state == 'read' then
  local _, stale
  live, _, stale = purge_reads(KEYS[1], now)
  if live and stale then
    got = redis.call('HMGET', KEYS[1], unpack(fields))
  end
end
local reading = false
if live then
  if got[1] then
    return restart_read(KEYS[1], owner, hold, now, lease, got[2], got[3], got[4])
  end
  reading = got[2] ~= false
end
if not reading then
  local writer_mark = writers_wait_until()
  if writer_mark then
    return {0, math.max(writer_mark - now, 0)}
  end
end
if reading then
  return add_read(KEYS[1], owner, hold, now, lease, tonumber(got[3]), tonumber(got[2]), got[4])
end
return add_read(KEYS[1], owner, hold, now, lease, next_fence(KEYS[2]), 0, live and got[4])
