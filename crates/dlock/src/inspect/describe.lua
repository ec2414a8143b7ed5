-- What a key holds, in the words of type_error: a Redis type, or the kind of a dlock hash;
-- for a fencing counter that cannot count, why ('text', or 'huge' at 2^53 and beyond).
-- KEYS[1] the key; ARGV[1] what was wanted there. Returns the kind as a string.
local found = redis.call('TYPE', KEYS[1]).ok
if found == 'hash' then
  found = redis.call('HGET', KEYS[1], KIND) or 'hash'
elseif found == 'string' and ARGV[1] == 'counter' then
  local _, problem = fence_counter(KEYS[1])
  if problem == 'huge' then
    found = 'huge'
  elseif problem == 'counter' then
    found = 'text'
  end
end
return found
