-- The current leader: the record, if the hold it names still holds the lock.
-- KEYS[1] lock key; KEYS[2] the leader record
-- Returns {value, term, remaining lease ms}, or {} when nobody leads (no holder, or a
-- holder that has not proclaimed yet, or a record left by a leader whose lease ended),
-- or -1 when the name holds another kind of lock (no election can lead there).
local holder = redis.pcall('GET', KEYS[1])
if type(holder) == 'table' then
  if holder.err and string.sub(holder.err, 1, 9) == 'WRONGTYPE' then
    return -1
  end
  return redis.error_reply(holder.err)
end
if not holder then
  return {}
end
local record = redis.call('HMGET', KEYS[2], 'value', 'term', 'token')
if record[3] ~= holder then
  return {}
end
return {record[1], record[2], redis.call('PTTL', KEYS[1])}
