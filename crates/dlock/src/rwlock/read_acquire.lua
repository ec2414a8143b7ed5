-- Grants a read hold: when no writer holds and no writer waits, or when the owner already
-- reads (re-entry must not queue behind a writer that waits for this very reader).
-- ARGV[1] owner id, ARGV[2] lease ms, ARGV[3] request id (a resend does not count twice)
-- Returns {1, fence, holds} | {0, ms} busy, ms until the blocking lease ends (-1 unknown) |
--         {-1, n} wrong type at KEYS[n]
local current = writer_of(KEYS[1])
if current == nil then
  return {-1, 1}
end
local now = now_ms()
local owner, lease, request = ARGV[1], tonumber(ARGV[2]), ARGV[3]
local ok = redis.pcall('ZCARD', KEYS[3])
if type(ok) == 'table' and ok.err then
  return {-1, 3}
end
purge_readers(KEYS[3], KEYS[4], now)
queue_purge(KEYS[5], KEYS[6], now)
-- Membership in the readers set (purged of expired readers above) says who reads now.
if redis.call('ZSCORE', KEYS[3], owner) then
  local holds = tonumber(redis.call('HGET', KEYS[4], owner .. ':n')) or 0
  local fence = tonumber(redis.call('HGET', KEYS[4], owner .. ':fence'))
  if redis.call('HGET', KEYS[4], owner .. ':req') == request then
    return {1, fence, holds}
  end
  return {1, fence, add_reader(owner, now, lease, request, fence)}
end
if not current and redis.call('ZCARD', KEYS[5]) == 0 then
  local fence = redis.pcall('INCR', KEYS[2])
  if type(fence) == 'table' and fence.err then
    return {-1, 2}
  end
  return {1, fence, add_reader(owner, now, lease, request, fence)}
end
if current then
  return {0, redis.call('PTTL', KEYS[1])}
end
-- Writers wait: re-check when the first one's waiter lease would end.
local head = queue_head(KEYS[5])
local lease_end = tonumber(redis.call('ZSCORE', KEYS[6], head) or now)
return {0, math.max(lease_end - now, 0)}
