-- Every script's body runs under `answer` (script.rs wraps it in a function): an error it
-- raises, or that a redis.call in it passes on (a refusal of the server: NOPERM, OOM,
-- READONLY, ...; a DLOCKTYPE error of the prelude), becomes the script's error reply, and
-- an error reply it returns is worded the same way: typed alike on every server, in the
-- server's own words (a permission refusal inside a script reads 'ERR The user executing
-- the script can't ...' on 6.2 and 7.0, 'NOPERM ...' on later servers: Refused on each).
-- Scripts return errors, never raise them: Redis 6.2 cannot render a raised table (its
-- handler concatenates it) and puts where an error was raised before raised text and
-- caught replies; Redis 7 adds the script's hash after raised text.

-- Where Redis 6.2 says an error was raised, before its text: '@user_script: 12: ' or
-- '=[C]: -1: ' (Lua's own 'user_script:12: ' before a script's bug stays).
local RAISED_AT = '^[^ ]+: %-?%d+: (.*)$'

local function answer(body)
  -- Redis 6.2 replicates a script whole unless told otherwise, and with
  -- `lua-replicate-commands no` refuses a write after TIME; later servers always replicate
  -- effects (the call is a no-op there, and gone on some).
  if redis.replicate_commands then
    redis.replicate_commands()
  end
  local ok, reply = pcall(body)
  if ok and not (type(reply) == 'table' and reply.err) then
    return reply
  end
  local text = reply
  if type(reply) == 'table' then
    text = reply.err
  end
  text = tostring(text)
  local rest = string.match(text, RAISED_AT)
  while rest do
    text = rest
    rest = string.match(text, RAISED_AT)
  end
  -- 6.2 keeps the '-' and the line end of its own refusals ('-OOM ...\r\n').
  text = string.gsub(text, '^%-', '')
  text = string.gsub(text, '%s+$', '')
  -- Words without a code (6.2's for an ACL refusal, a script's bug) are an ERR, as Redis 7
  -- answers them.
  if not string.find(text, '^%u[%u%d_]+ ') then
    text = 'ERR ' .. text
  end
  return redis.error_reply(text)
end
