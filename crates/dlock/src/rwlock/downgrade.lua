-- Turns a held write lock into a read hold of ARGV[2] without a gap: the read hold exists
-- before the writer key is deleted, so no other writer can slip in between.
-- ARGV[1] writer token, ARGV[2] owner id, ARGV[3] lease ms, ARGV[4] request id,
-- ARGV[5] the write grant's fence, ARGV[6] readers' channel
-- Returns the owner's read holds, or 0 when the write lock was no longer ours.
if writer_of(KEYS[1]) ~= ARGV[1] then
  return 0
end
local holds = add_reader(ARGV[2], now_ms(), tonumber(ARGV[3]), ARGV[4], ARGV[5])
redis.call('DEL', KEYS[1])
if redis.call('ZCARD', KEYS[5]) == 0 then
  redis.call('PUBLISH', ARGV[6], KEYS[1]) -- other readers may join now
end
return holds
