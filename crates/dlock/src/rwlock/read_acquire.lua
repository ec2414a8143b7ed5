-- Grants a read hold: when no writer holds and no writer waits, or when the owner already
-- reads (re-entry must not queue behind a writer that waits for this very reader).
-- ARGV[1] owner id, ARGV[2] lease ms, ARGV[3] hold token
-- Returns {1, fence, holds}  granted (a resent request restarts its lease, counted once)
--         {0, ms}            busy; ms until the blocking lease ends (-1 unknown)
local state = rw_state(KEYS[1])
local owner, lease, hold = ARGV[1], tonumber(ARGV[2]), ARGV[3]
local now = now_ms()
-- While writers queue, a reader re-checks when the first one's waiter lease would end (a
-- crashed writer must not hold readers back longer than that).
local function writers_wait_until()
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
local live = 0
if state == 'read' then
  live = purge_reads(KEYS[1], now)
end
local reading = false
if live > 0 then
  if redis.call('HEXISTS', KEYS[1], 'h:' .. hold) == 1 then
    return restart_read(KEYS[1], owner, hold, now, lease)
  end
  reading = redis.call('HEXISTS', KEYS[1], 'o:' .. owner) == 1
end
local writer_mark = writers_wait_until()
if not reading and writer_mark then
  return {0, math.max(writer_mark - now, 0)}
end
local fence = 0
if not reading then
  fence = next_fence(KEYS[2])
end
local granted, holds = add_read(KEYS[1], owner, hold, now, lease, fence, live == 0)
return {1, granted, holds}
