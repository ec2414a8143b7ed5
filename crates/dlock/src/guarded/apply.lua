-- Applies a batch of the caller's commands to data keys in the lock's slot, only while
-- the hold `token` is held, or applies nothing.
-- KEYS[1] lock key; KEYS[2] the holder's record of its last batch; KEYS[3..] one data key
-- per command, in order.
-- ARGV[1] kind ('s', 'r', 'e'; see holds.lua); ARGV[2] token; ARGV[3] the batch's id;
-- ARGV[4] how long the record is kept (ms; 0: a batch of reads, which is not recorded);
-- ARGV[5] how many commands; then per command its name, its count of arguments after the
-- key, and those arguments (checked by the caller: single-key commands, at most 4096
-- arguments each, within what Lua's stack passes on).
-- Returns {1, replies} applied; {0} not held (nothing applied); {3} not held, and the key
-- holds another kind of lock (nothing applied); {2, n, error} the n-th command was refused
-- (those before it stay applied: Redis has no rollback, as in MULTI).
--
-- Safe to run twice: the record keeps the batch's id and what the batch answered, so a
-- resend after a lost reply answers the same again and applies nothing more. One holder
-- sends one batch at a time (the guard sees to it), so one record per holder is enough.
local record = redis.call('GET', KEYS[2])
if record then
  local space = string.find(record, ' ', 1, true)
  if space and string.sub(record, 1, space - 1) == ARGV[3] then
    return cmsgpack.unpack(string.sub(record, space + 1))
  end
end

local ok, held = pcall(hold_state, ARGV[1], KEYS[1], ARGV[2], now_ms())
if not ok then
  if is_type_error(held) then
    return {3} -- another kind holds the key now: not us (or the caller named the wrong kind)
  end
  reraise(held)
end
if not held then
  return {0}
end

local replies = {}
local answer = nil
local at = 6
for n = 1, tonumber(ARGV[5]) do
  local name, count = ARGV[at], tonumber(ARGV[at + 1])
  local reply = redis.pcall(name, KEYS[2 + n], unpack(ARGV, at + 2, at + 1 + count))
  at = at + 2 + count
  if type(reply) == 'table' and reply.err then
    answer = {2, n, reply.err}
    break
  end
  replies[n] = reply
end
answer = answer or {1, replies}
if ARGV[4] ~= '0' then
  redis.call('SET', KEYS[2], ARGV[3] .. ' ' .. cmsgpack.pack(answer), 'PX', ARGV[4])
end
return answer
