-- decide.lua: one sluice decision, atomically, inside Redis: every part of a
-- policy decided together, all or nothing, with the exact semantics of
-- docs/semantics.md and the C algorithms (src/algo/).
--
-- Redis's Lua numbers are doubles: every value here is an integer below
-- 2^53, so every + - * is exact, and division goes through idiv (floor,
-- corrected to be exact). store/redis/decide.c refuses a policy whose
-- values could grow past that (an algorithm's largest(), algo/algo.h)
-- before it ever reaches this script.
--
-- KEYS[1]    the key's state: "t v v v ..." (t: the highest time decided for
--            this key; then each part's numbers, see below)
-- KEYS[2..]  one sorted set per sliding-log part, in part order
--            (member: running total of admitted cost, score: ms)
-- ARGV[1]    the reading in ms, or "" to read the server's TIME
-- ARGV[2]    cost
-- ARGV[3]    ttl extra ms, added to every expiry (ttl_grace_ms: by default
--            60000 with the client's clock, 0 with the server's)
-- ARGV[4..]  per part: algorithm (its id, sluice_algorithm: 1 token bucket,
--            2 sliding window, 3 fixed window, 4 leaky bucket, 5 sliding
--            log), limit, a, b (buckets: a = p, b = r, the scaled units;
--            the others: a = W)
-- returns    {allowed, remaining, retry_after_ms, reset_ms, delay_ms, limit,
--             part, now_ms, part_reset_ms}
--
-- What each function mirrors in C (the same arithmetic, step by step):
--
--   idiv, cdiv        sluice__floor_div, sluice__ceil_div   algo/algo.h
--   bucket            sluice__gcra_core: _room, _allowed,   algo/algo.h
--                     _denied; shaper: the leaky bucket's   algo/leaky_bucket.c
--                     delay; cost 0: sluice__gcra_peek      algo/token_bucket.c
--   the fast path     sluice__policy_decide of one part     composite.c
--                     (decided at once), on a bucket
--   eff               sluice__store_time: never backwards   store/store.h
--   bucket_part       sluice__gcra_decide as a dry run,     algo/token_bucket.c
--                     and peek
--   fixed_window      fw_at, fw_fill, fw_decide, fw_peek    algo/fixed_window.c
--   sliding_window    sw_at, sw_admit_at, sw_fill,          algo/sliding_window.c
--                     sw_decide, sw_peek
--   sliding_log       log_at, first_cum, log_fill,          algo/sliding_log.c
--                     log_decide, log_peek
--   the parts loop,   sluice__policy_decide: every part     composite.c
--   combine, commit   asked, combine(), then committed
--                     only when every part admits

local tonumber = tonumber -- a local: no global lookup at each use

local now
if ARGV[1] == '' then
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
else
  now = tonumber(ARGV[1])
end
local cost = tonumber(ARGV[2])
local extra_ttl = tonumber(ARGV[3])
local n_parts = (#ARGV - 3) / 4
local FRESH = -9007199254740992 -- -2^53: before any reading

-- floor(x / y) for integers |x| < 2^53, 0 < y < 2^53: the quotient of the
-- doubles may round across an integer; one correction step makes it exact.
local function idiv(x, y)
  local q = math.floor(x / y)
  local m = x - q * y
  if m < 0 then q = q - 1 elseif m >= y then q = q + 1 end
  return q
end

-- The one bucket, token or leaky (shaper): a request of cost n at t on
-- state (A, B), A the whole ms of its theoretical arrival time and B the
-- scaled units past it (0 <= B < r; C keeps the TAT in scaled units,
-- A * r + B). Returns ok, remaining, reset and the wait (delay_ms when
-- admitted, retry_after_ms when denied), and when admitted the new state
-- (A, B). Asked for n = 0 about a state that admits, it tells what that
-- state holds as it is (sluice__gcra_peek's remaining and reset).
-- Ceilings are -idiv(-x, y) here, and cdiv is made after the fast path:
-- a closure costs every call that makes it (callgrind: one more made
-- before the fast path costs it more than its call of bucket).
local function bucket(limit, p, rr, shaper, A, B, t, n)
  local tau, b = limit * p, 0
  if A >= t then b = (A - t) * rr + B end -- A < t: (A - t) * r + B < 0, as B < r
  local nb = b + n * p
  if nb > tau then
    local rem = 0
    if b <= tau then rem = idiv(tau - b, p) end
    return false, rem, -idiv(-b, rr), -idiv(tau - nb, rr)
  end
  local whole = idiv(nb, rr)
  local delay = 0
  if shaper then delay = -idiv(-b, rr) end
  return true, idiv(tau - nb, p), -idiv(-nb, rr), delay, t + whole, nb - whole * rr
end

-- The common case, a one-part token or leaky bucket, without the tables
-- of the general path below (measured: a third of the script's time): the
-- same state, "t A B", read and written in straight lines.
if #ARGV == 7 and (ARGV[4] == '1' or ARGV[4] == '4') then
  local limit = tonumber(ARGV[5])
  local eff, A, B = now, FRESH, 0
  local st = redis.call('GET', KEYS[1])
  if st then
    local t, a, b = string.match(st, '^(%S+) (%S+) (%S+)$')
    t, A, B = tonumber(t), tonumber(a), tonumber(b)
    if t > eff then eff = t end
  end
  local p, rr, shaper = tonumber(ARGV[6]), tonumber(ARGV[7]), ARGV[4] == '4'
  local ok, rem, reset, wait, nA, nB = bucket(limit, p, rr, shaper, A, B, eff, cost)
  if not ok then return {0, rem, wait, reset, 0, limit, 0, eff, reset} end
  local ttl = reset
  if ttl < 1 then ttl = 1 end
  redis.call('SET', KEYS[1], string.format('%d %d %d', eff, nA, nB), 'PX', ttl + extra_ttl)
  return {1, rem, 0, reset, wait, limit, 0, eff, reset}
end

local function cdiv(x, y) return -idiv(-x, y) end -- ceil(x / y)
local function num(x) return string.format('%.0f', x) end

-- the state
local raw = redis.call('GET', KEYS[1])
local v = {}
if raw then
  for w in string.gmatch(raw, '%S+') do v[#v + 1] = tonumber(w) end
end
local fresh = #v == 0
local eff = now
if not fresh and v[1] > eff then eff = v[1] end -- time never runs backwards
local pos = 2 -- next state number to read

-- Each part returns a result r:
--   r.ok, r.rem_now, r.reset_now, r.retry (when not ok),
--   r.rem, r.reset, r.delay (when admitted), r.state (numbers to store),
--   r.commit (function run when every part admits)

local function bucket_part(limit, p, rr, shaper)
  local A, B = FRESH, 0
  if not fresh then A, B = v[pos], v[pos + 1] end
  pos = pos + 2
  local ok, rem, reset, wait, nA, nB = bucket(limit, p, rr, shaper, A, B, eff, cost)
  if not ok then
    return {ok = false, rem_now = rem, reset_now = reset, retry = wait, state = {A, B}}
  end
  local _, rem_now, reset_now = bucket(limit, p, rr, false, A, B, eff, 0) -- what it holds now
  return {ok = true, rem = rem, reset = reset, delay = wait, state = {nA, nB}, rem_now = rem_now,
          reset_now = reset_now}
end

local function fixed_window(limit, W)
  local k, c = 0, 0
  if not fresh then k, c = v[pos], v[pos + 1] end
  pos = pos + 2
  local kt = idiv(eff, W)
  local K, cnt = kt, 0
  if c > 0 and k >= kt then K, cnt = k, c end
  local to_end = (K + 1) * W - eff
  local r = {rem_now = limit - cnt, reset_now = 0}
  if cnt > 0 then r.reset_now = to_end end
  if cnt + cost <= limit then
    r.ok = true
    r.rem = limit - cnt - cost
    r.reset = to_end
    r.delay = 0
    r.state = {K, cnt + cost}
  else
    r.ok = false
    r.retry = to_end
    r.state = {k, c}
  end
  return r
end

local function sliding_window(limit, W)
  local k, pv, cu = 0, 0, 0
  if not fresh then k, pv, cu = v[pos], v[pos + 1], v[pos + 2] end
  pos = pos + 3
  local te = eff
  local empty = pv == 0 and cu == 0
  if not empty and k * W > te then te = k * W end
  local K = idiv(te, W)
  local e = te - K * W
  local P, Cn = 0, 0
  if not empty then
    if K == k + 1 then P = cu elseif K == k then P, Cn = pv, cu end
  end
  local function fill(cur, r)
    local rem = limit - cur - cdiv(P * (W - e), W)
    if rem < 0 then rem = 0 end
    local reset = 0
    if cur > 0 then reset = (K + 2) * W - eff elseif P > 0 then reset = (K + 1) * W - eff end
    return rem, reset
  end
  local r = {}
  r.rem_now, r.reset_now = fill(Cn)
  if P * (W - e) + (Cn + cost) * W <= limit * W then
    r.ok = true
    r.rem, r.reset = fill(Cn + cost)
    r.delay = 0
    r.state = {K, P, Cn + cost}
  else
    r.ok = false
    local at = nil
    if Cn + cost <= limit then -- later in this window, as prev fades
      local x = W - idiv((limit - Cn - cost) * W, P)
      if x < W then at = K * W + x end
    end
    if not at then -- in the next window, where the previous count is Cn
      local e2 = 0
      if Cn > 0 then e2 = W - idiv((limit - cost) * W, Cn) end
      if e2 < 0 then e2 = 0 end
      at = (K + 1) * W + e2
    end
    r.retry = at - eff
    r.state = {k, pv, cu}
  end
  return r
end

local function sliding_log(limit, W, z)
  -- The log keeps its own base (the running total before its oldest entry)
  -- in a member "b<base>" at score -inf, so it stands alone: if Redis drops
  -- the state name (maxmemory), the log still counts right. That member also
  -- keeps the set from ever being empty while the decision lives, so no
  -- command here deletes or creates a name mid-way (a slot migration refuses
  -- both). The state keeps a number for the log, unused.
  pos = pos + 1
  local base, mark = 0, nil
  local marks = redis.call('ZRANGEBYSCORE', z, '-inf', '-inf')
  if #marks > 0 then mark = marks[1]; base = tonumber(string.sub(mark, 2)) end
  local newest_ts, newest_cum = nil, base
  local last = redis.call('ZRANGE', z, -1, -1, 'WITHSCORES')
  if #last > 0 and last[1] ~= mark then newest_cum, newest_ts = tonumber(last[1]), tonumber(last[2]) end
  local te = eff
  if newest_ts and newest_ts > te then te = newest_ts end
  local edge = te - W -- entries at or before edge have left the window
  local expired = redis.call('ZREVRANGEBYSCORE', z, edge, '(-inf', 'LIMIT', 0, 1)
  local before = base
  if #expired > 0 then before = tonumber(expired[1]) end
  local used = newest_cum - before
  local r = {rem_now = limit - used, reset_now = 0, state = {0}}
  if used > 0 then r.reset_now = newest_ts + W - eff end
  if used + cost <= limit then
    r.ok = true
    r.rem = limit - used - cost
    r.reset = W + te - eff
    r.delay = 0
    r.commit = function(ttl)
      -- running totals near 2^50: count them from the new base again
      local rebase = newest_cum + cost > 1125899906842624
      local new_mark = 'b' .. num(rebase and 0 or before)
      if new_mark ~= mark then -- the new one first: never empty
        redis.call('ZADD', z, '-inf', new_mark)
        if mark then redis.call('ZREM', z, mark) end
      end
      if #expired > 0 then redis.call('ZREMRANGEBYSCORE', z, '(-inf', edge) end
      local top = newest_cum
      if rebase then
        local all = redis.call('ZRANGEBYSCORE', z, '(-inf', '+inf', 'WITHSCORES')
        redis.call('ZREMRANGEBYSCORE', z, '(-inf', '+inf')
        for i = 1, #all, 2 do
          redis.call('ZADD', z, all[i + 1], num(tonumber(all[i]) - before))
        end
        top = top - before
      end
      if newest_ts == te and used > 0 then redis.call('ZREM', z, num(top)) end
      redis.call('ZADD', z, te, num(top + cost))
      redis.call('PEXPIRE', z, ttl)
    end
  else
    r.ok = false
    -- the first entry q whose running total reaches newest + cost - limit;
    -- at ts_q + W enough has left. Binary search by rank over the window
    -- (ranks count the mark, which sorts first).
    local target = newest_cum + cost - limit
    local hi = redis.call('ZCARD', z) - 1
    local first = redis.call('ZRANGEBYSCORE', z, '(' .. num(edge), '+inf', 'LIMIT', 0, 1)
    local lo = redis.call('ZRANK', z, first[1])
    while lo < hi do
      local mid = idiv(lo + hi, 2)
      local m = redis.call('ZRANGE', z, mid, mid)
      if tonumber(m[1]) >= target then hi = mid else lo = mid + 1 end
    end
    local q = redis.call('ZRANGE', z, lo, lo, 'WITHSCORES')
    r.retry = tonumber(q[2]) + W - eff
  end
  return r
end

-- decide every part without changing anything
local results = {}
local all = true
local log_key = 2
for i = 0, n_parts - 1 do
  local a = 4 + 4 * i
  local algo, limit, pa, pb = tonumber(ARGV[a]), tonumber(ARGV[a + 1]), tonumber(ARGV[a + 2]), tonumber(ARGV[a + 3])
  local r
  if algo == 1 then r = bucket_part(limit, pa, pb, false)
  elseif algo == 4 then r = bucket_part(limit, pa, pb, true)
  elseif algo == 3 then r = fixed_window(limit, pa)
  elseif algo == 2 then r = sliding_window(limit, pa)
  else
    r = sliding_log(limit, pa, KEYS[log_key])
    log_key = log_key + 1
  end
  r.limit = limit
  results[#results + 1] = r
  all = all and r.ok
end

-- combine: least remaining (first on a tie) sets limit and part; greatest
-- retry, reset and delay
local out = {0, 0, 0, 0, 0, 0, 0, eff, 0}
if all then out[1] = 1 end
for i, r in ipairs(results) do
  local rem, retry, reset, delay = r.rem_now, 0, r.reset_now, 0
  if all then rem, reset, delay = r.rem, r.reset, r.delay
  elseif not r.ok then retry = r.retry end
  if i == 1 or rem < out[2] then out[2], out[6], out[7], out[9] = rem, r.limit, i - 1, reset end
  if retry > out[3] then out[3] = retry end
  if reset > out[4] then out[4] = reset end
  if delay > out[5] then out[5] = delay end
end

if all then
  local ttl = out[4]
  if ttl < 1 then ttl = 1 end
  ttl = ttl + extra_ttl
  for _, r in ipairs(results) do
    if r.commit then r.commit(ttl) end
  end
  local words = {num(eff)}
  for _, r in ipairs(results) do
    for _, x in ipairs(r.state) do words[#words + 1] = num(x) end
  end
  redis.call('SET', KEYS[1], table.concat(words, ' '), 'PX', ttl)
end
return out
