-- The read-hold floor's release, of `dlock bench` (not a dlock script): the hold's field
-- removed from the hash (its token is its own, so the delete is the ownership check; the
-- last field's removal deletes the key). No purge, no hand-off to a queued writer.
-- KEYS[1] lock key; ARGV[1] hold token
-- Returns 1 released, 0 not held (gone, or a writer holds the key now).
local removed = redis.pcall('HDEL', KEYS[1], ARGV[1])
if type(removed) == 'table' and removed.err then
  if string.sub(removed.err, 1, 9) == 'WRONGTYPE' then
    return 0
  end
  return removed
end
return removed
