-- Turns a held write lock into a read hold without a gap: the read hold replaces the
-- writer's token in one step, so no other writer can slip in between.
-- ARGV[1] writer token, ARGV[2] owner id, ARGV[3] lease ms, ARGV[4] read hold token,
-- ARGV[5] the write grant's fence, ARGV[6] readers' channel
-- Returns {1, fence, holds} (also for a resend that finds the read hold made), or
--         {0, -1} when the write lock was no longer ours.
local fields = {'h:' .. ARGV[4], 'o:' .. ARGV[2], 'f:' .. ARGV[2], ENDS}
local state, got = rw_read(KEYS[1], fields)
local now, lease = now_ms(), tonumber(ARGV[3])
if state == 'read' and got[1] and entry_parse(got[1]) > now then
  -- A resend: the read hold was made. Purged first, so a lost index is rebuilt whole
  -- before the hold's lease restarts in it.
  local live, _, stale = purge_reads(KEYS[1], now)
  if stale then
    got = redis.call('HMGET', KEYS[1], unpack(fields))
  end
  if live and got[1] then
    return restart_read(KEYS[1], ARGV[2], ARGV[4], now, lease, got[2], got[3], got[4])
  end
end
if state ~= 'write' or redis.call('GET', KEYS[1]) ~= ARGV[1] then
  return {0, -1}
end
redis.call('DEL', KEYS[1])
local granted = add_read(KEYS[1], ARGV[2], ARGV[4], now, lease, tonumber(ARGV[5]), 0, false)
if redis.call('ZCARD', KEYS[3]) == 0 then
  notify(ARGV[6], 'all') -- other readers may join now
end
return granted
