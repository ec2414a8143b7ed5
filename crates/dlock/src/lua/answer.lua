-- Every script's body runs under `answer` (script.rs wraps it in a function), but the
-- mutex's acquire and release (`lua_script!(unwrapped ..)`): an error it raises, or that a
-- redis.call in it passes on (a refusal of the server: NOPERM, OOM, READONLY, ...; a
-- DLOCKTYPE error of the prelude), becomes the script's error reply, and
-- an error reply it returns is worded the same way: typed alike on every server, in the
-- server's own words (a permission refusal inside a script reads 'ERR The user executing
-- the script can't ...' on 6.2 and 7.0, 'NOPERM ...' on later servers: Refused on each).
-- Scripts return errors, never raise them: Redis 6.2 cannot render a raised table (its
-- handler concatenates it) and puts where an error was raised before raised text and
-- caught replies; Redis 7 adds the script's hash after raised text.
-- The two unwrapped scripts run once per hold, where `answer`'s protected call costs a
-- fifth of the release's server time (docs/decisions.md): they catch each refusal with
-- redis.pcall and answer it through `worded` themselves, and call `replicate_effects`
-- first when they write after TIME.

-- Where Redis 6.2 says an error was raised, before its text: '@user_script: 12: ' or
-- '=[C]: -1: ' (Lua's own 'user_script:12: ' before a script's bug stays).
local RAISED_AT = '^[^ ]+: %-?%d+: (.*)$'

-- The script's error reply for a refusal's or a raised error's `text`, worded alike on every
-- server (see above).
local function worded(text)
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

-- Redis 6.2 replicates a script whole unless told otherwise, and with
-- `lua-replicate-commands no` refuses a write after TIME; later servers always replicate
-- effects (the call is a no-op there, and gone on some). Called before any command.
local function replicate_effects()
  if redis.replicate_commands then
    redis.replicate_commands()
  end
end

local function answer(body)
  replicate_effects()
  local ok, reply = pcall(body)
  if ok and not (type(reply) == 'table' and reply.err) then
    return reply
  elseif type(reply) == 'table' then
    return worded(reply.err)
  end
  return worded(reply)
end
