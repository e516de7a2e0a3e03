"""The Lua scripts of the session buffer and the order of the keys they take.

Each script runs atomically on the keys of one session (one hash tag, one slot).
"""

# Keys of a session, in the order every script takes them.
SUFFIXES = ("turns", "data", "seen", "meta", "folds", "fold-lock")

# How full the buffer is: {turns in it, their tokens}. Shared by the scripts below.
FILL = """
local function fill(turns_key, meta_key)
  return {redis.call('ZCARD', turns_key), tonumber(redis.call('HGET', meta_key, 'tokens') or '0')}
end
"""

APPEND = (
    FILL
    + """
-- KEYS: turns (zset), data (hash), seen (set), meta (hash), folds, fold-lock
-- ARGV: turn_id, score, turn json, tokens, ttl seconds, prev_session_id, project_id,
--       agent_id, '1' to refuse the turn of an agent whose session it is not
-- Returns {added 0|1 (-1: refused, another agent's), turns in the buffer, tokens}
-- meta also marks every project the session's turns belonged to ('project:<id>'),
-- so deleting a project finds its sessions, and the agent whose session it is
-- ('agent': the first turn's, '' for the user's own).
local ttl = tonumber(ARGV[5])
local added = 0
local owner = redis.call('HGET', KEYS[4], 'agent')
if ARGV[9] == '1' and owner and owner ~= ARGV[8] then
  local now = fill(KEYS[1], KEYS[4])
  return {-1, now[1], now[2]}
end
if redis.call('SADD', KEYS[3], ARGV[1]) == 1 then
  redis.call('HSETNX', KEYS[4], 'agent', ARGV[8])
  redis.call('ZADD', KEYS[1], ARGV[2], ARGV[1])
  redis.call('HSET', KEYS[2], ARGV[1], ARGV[3])
  redis.call('HINCRBY', KEYS[4], 'tokens', tonumber(ARGV[4]))
  if ARGV[6] ~= '' then redis.call('HSETNX', KEYS[4], 'prev_session_id', ARGV[6]) end
  if ARGV[7] ~= '' then redis.call('HSET', KEYS[4], 'project:' .. ARGV[7], '1') end
  added = 1
end
for i = 1, 5 do redis.call('EXPIRE', KEYS[i], ttl) end
local now = fill(KEYS[1], KEYS[4])
return {added, now[1], now[2]}
"""
)

READ = """
-- KEYS: turns, data, seen, meta, folds, fold-lock
-- ARGV: 1 to include the folds; a fold-lock token to take the lock first ('' for
--       none); the lock's life in ms.
-- Returns {0} if the lock is taken by another, else {1, the turns in order, turns
-- ever appended, meta flat list, folds flat list}
if ARGV[2] ~= '' then
  -- Already ours: the client retried this call after a dropped connection.
  if not redis.call('SET', KEYS[6], ARGV[2], 'NX', 'PX', ARGV[3])
     and redis.call('GET', KEYS[6]) ~= ARGV[2] then
    return {0}
  end
end
-- The turns' data by HMGET in slices, not one HGET per turn (unpack's limit
-- is some thousands of values).
local ids = redis.call('ZRANGE', KEYS[1], 0, -1)
local turns = {}
for first = 1, #ids, 1000 do
  local got = redis.call('HMGET', KEYS[2], unpack(ids, first, math.min(first + 999, #ids)))
  for i = 1, #got do turns[first + i - 1] = got[i] end
end
local folds = {}
if ARGV[1] == '1' then folds = redis.call('HGETALL', KEYS[5]) end
return {1, turns, redis.call('SCARD', KEYS[3]), redis.call('HGETALL', KEYS[4]), folds}
"""

FOLD = (
    FILL
    + """
-- KEYS: turns, data, seen, meta, folds, fold-lock
-- ARGV: expected summary version, summary, updated_at, ttl, folded tokens, then
--       the folded turn ids.
-- Stores the new summary and removes exactly the folded turns, or nothing.
-- Returns {new version, or -1 if the version moved, -2 if a turn is gone;
--          turns in the buffer; their tokens}
local function result(code)
  local now = fill(KEYS[1], KEYS[4])
  return {code, now[1], now[2]}
end
local version = tonumber(redis.call('HGET', KEYS[4], 'summary_version') or '0')
if version ~= tonumber(ARGV[1]) then return result(-1) end
local folded = {}
for i = 6, #ARGV do
  if not redis.call('ZSCORE', KEYS[1], ARGV[i]) then return result(-2) end
  folded[#folded + 1] = ARGV[i]
end
redis.call('ZREM', KEYS[1], unpack(folded))
redis.call('HDEL', KEYS[2], unpack(folded))
version = version + 1
redis.call('HSET', KEYS[4], 'summary', ARGV[2], 'summary_version', version,
           'summary_updated_at', ARGV[3])
redis.call('HINCRBY', KEYS[4], 'tokens', -tonumber(ARGV[5]))
redis.call('HSET', KEYS[5], version, cjson.encode(folded))
local ttl = tonumber(ARGV[4])
for i = 1, 5 do redis.call('EXPIRE', KEYS[i], ttl) end
return result(version)
"""
)

UNAPPEND = """
-- KEYS: turns, data, seen, meta, folds, fold-lock. ARGV: turn_id, its tokens.
-- Takes back a turn of a deleted user (created before the deletion): the turn
-- leaves the buffer and the seen set; a session left with nothing (no turn, no
-- summary) loses its keys.
if redis.call('ZREM', KEYS[1], ARGV[1]) == 1 then
  redis.call('HDEL', KEYS[2], ARGV[1])
  redis.call('HINCRBY', KEYS[4], 'tokens', -tonumber(ARGV[2]))
end
redis.call('SREM', KEYS[3], ARGV[1])
if redis.call('ZCARD', KEYS[1]) == 0 and not redis.call('HGET', KEYS[4], 'summary') then
  redis.call('DEL', KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5])
end
return 1
"""

UNLOCK = (
    FILL
    + """
-- KEYS: fold-lock, turns, meta. ARGV: token. Releases the lock if the token holds
-- it; returns {turns in the buffer, their tokens}.
if redis.call('GET', KEYS[1]) == ARGV[1] then redis.call('DEL', KEYS[1]) end
return fill(KEYS[2], KEYS[3])
"""
)

RENEW = """
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('PEXPIRE', KEYS[1], ARGV[2]) end
return 0
"""

# What the fold script returns instead of a new version when it changed nothing.
FOLD_VERSION_MOVED = -1
FOLD_TURN_GONE = -2
