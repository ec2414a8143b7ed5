-- What a key holds, in the words of type_error: a Redis type, or the kind of a dlock hash.
-- KEYS[1] the key. Returns the kind as a string.
local found = redis.call('TYPE', KEYS[1]).ok
if found == 'hash' then
  found = redis.call('HGET', KEYS[1], KIND) or 'hash'
end
return found
