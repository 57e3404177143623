-- decide.lua: one sluice call on one key, atomically, inside Redis: a
-- decision, a peek, a refund or a reset, every part of the policy
-- together, with the exact semantics of docs/semantics.md and the C code
-- (src/algo/, src/composite.c); a key kept by another configuration of
-- the policy's name is converted first ("Retune").
--
-- Redis's Lua numbers are doubles: every value here is an integer below
-- 2^53, so every + - * is exact, and division goes through idiv (floor,
-- corrected to be exact). store/redis/decide.c refuses a policy whose
-- values could grow past that (an algorithm's largest(), algo/algo.h)
-- before it ever reaches this script.
--
-- Names (decide.c makes them; the part in braces is their hash tag, so a
-- key's names share one cluster slot):
--
--   PREFIX{NAME|LEN:KEY}     the key's state, a string (below)
--   PREFIX{NAME|LEN:KEY}:I   the sorted set of part I (0..7), when part I
--                            of the configuration that keeps the key is
--                            a sliding log
--
-- A key is found by its policy's NAME alone: the state begins with the
-- configuration that wrote it (its CFG, as ARGV[4] below), so that a
-- call under another configuration of the name reads the state as that
-- one wrote it and converts it in the same call (a rolling deploy, two
-- configurations at once, converts the key at every switch). A
-- converted log part keeps its set, rewritten, when the new configuration
-- has a log at the same index; any other set of the old configuration is
-- deleted. A reset deletes all nine names a key may have under any
-- configuration.
--
-- KEYS[1]    the state: "CFG T v v v ..." (T: the highest time admitted at
--            for this key; then each part's numbers: buckets A B, fixed
--            window k c, sliding window k prev cur, sliding log 0)
-- KEYS[2..]  sorted sets of log parts, each named by its part index (its
--            last byte): those of this configuration's logs, and any the
--            script asked for (below); a reset: all eight
--            (member: running total of admitted cost, score: ms; and the
--            base, the running total before the oldest entry, as member
--            "b<base>" at score -inf)
-- ARGV[1]    the reading in ms, or "" to read the server's TIME
-- ARGV[2]    a decision's cost; a verb's letter and cost: pCOST (peek),
--            rCOST (refund), x0 (reset)
-- ARGV[3]    ttl extra ms, added to every expiry (ttl_grace_ms: by default
--            60000 with the client's clock, 0 with the server's)
-- ARGV[4]    CFG, the configuration: per part "KIND,LIMIT,A,B,PERIOD",
--            parts joined by "/": KIND the algorithm (sluice_algorithm: 1
--            token bucket, 2 sliding window, 3 fixed window, 4 leaky
--            bucket, 5 sliding log), negated for a shadow part; LIMIT;
--            buckets: A = p, B = r (the scaled units), the others: A = W,
--            B = 0; PERIOD: period_ms as configured (all that tells one
--            configuration from another: sluice_config)
-- returns    {allowed, remaining, retry_after_ms, reset_ms, delay_ms, limit,
--             part, now_ms, part_reset_ms, shadow_denied}; or {-1, MASK}
--            when the key is kept by a configuration with logs at part
--            indices not in KEYS (bit I: part I), having changed nothing:
--            the caller then calls again with those names too; a
--            decision denied (ARGV[2] a cost) adds, per part, three more:
--            retry1, retry, reset (the cache of denials' figures, at the
--            end of this script)
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
--   sw_at             sw_at                                 algo/sliding_window.c
--   log_view          log_at                                algo/sliding_log.c
--   peek              each algorithm's peek                 algo/*.c
--   ask               each algorithm's decide, not          algo/*.c
--                     committed (sw_admit_at, first_cum:
--                     a denial's retry)
--   commit, log_commit  decide, committed (log: dropping    algo/*.c
--                     what left the window, merging)
--   refund,           each algorithm's refund (log: newest  algo/*.c
--   log_refund        entries first)
--   carry, log_trim   each algorithm's carry                algo/*.c
--   charge,           sluice__policy_convert's charge of    composite.c
--   log_charge        what was in use into a fresh part
--   the conversion    sluice__policy_convert                composite.c
--   the parts loop    ask() of sluice__policy_decide,       composite.c
--                     _peek (shadow parts: never deny, a
--                     cost above their limit a denial)
--   combine           combine(): the enforced parts alone   composite.c
--   the verbs         sluice__policy_refund, then a peek    composite.c
--                     of cost 1; a reset: fresh, a peek

local tonumber = tonumber -- a local: no global lookup at each use

local now
if ARGV[1] == '' then
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
else
  now = tonumber(ARGV[1])
end
local cost = tonumber(ARGV[2]) -- nil: a verb's
local extra_ttl = tonumber(ARGV[3])
local cfg = ARGV[4]
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
-- (A, B). Asked for n = 0, it tells what the state holds as it is
-- (sluice__gcra_peek's remaining and reset).
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

-- The common case, a decision of a one-part token or leaky bucket whose
-- key this configuration keeps (or nobody), without the tables of the
-- general path below (measured: a third of the script's time): the same
-- state, "CFG T A B", read and written in straight lines.
local raw, have = nil, false
local kind, limit, p, rr
if cost then kind, limit, p, rr = string.match(cfg, '^([14]),(%d+),(%d+),(%d+),%d+$') end
if kind then
  raw, have = redis.call('GET', KEYS[1]), true
  local t, a, b
  -- this configuration's: CFG first (found, not matched: a pattern would
  -- walk it), then " T A B"
  if raw and string.find(raw, cfg, 1, true) == 1 then t, a, b = string.match(raw, '^ (%S+) (%S+) (%S+)$', #cfg + 1) end
  if not raw or t then
    limit = tonumber(limit)
    local eff, A, B = now, FRESH, 0
    if raw then
      t, A, B = tonumber(t), tonumber(a), tonumber(b)
      if t > eff then eff = t end
    end
    local ok, rem, reset, wait, nA, nB = bucket(limit, tonumber(p), tonumber(rr), kind == '4', A, B, eff, cost)
    if not ok then -- and the part's figures for the cache of denials (below)
      local wait1 = wait
      if cost ~= 1 then
        local ok1, _, _, w1 = bucket(limit, tonumber(p), tonumber(rr), false, A, B, eff, 1)
        wait1 = ok1 and 0 or w1
      end
      return {0, rem, wait, reset, 0, limit, 0, eff, reset, 0, wait1, wait, reset}
    end
    local ttl = reset
    if ttl < 1 then ttl = 1 end
    redis.call('SET', KEYS[1], string.format('%s %d %d %d', cfg, eff, nA, nB), 'PX', ttl + extra_ttl)
    return {1, rem, 0, reset, wait, limit, 0, eff, reset, 0}
  end
end

local function cdiv(x, y) return -idiv(-x, y) end -- ceil(x / y)
local function num(x) return string.format('%.0f', x) end
local WORDS = {2, 3, 2, 2, 1} -- the state's numbers of a part, by algorithm
-- The general path keeps to locals, multiple values and few tables: in
-- Redis's Lua a table of named fields costs about as much as a GET, and
-- every function defined here a closure at each call (callgrind), so
-- those of logs, refunds and conversions are made only when needed.

-- the verb, and the configuration's parts: P[5i-4 .. 5i] = KIND, LIMIT,
-- A, B, PERIOD of part i
local verb = 'a'
if not cost then verb, cost = string.sub(ARGV[2], 1, 1), tonumber(string.sub(ARGV[2], 2)) or 0 end
local P = {}
for kd, L, a, b, c in string.gmatch(cfg, '(%-?%d+),(%d+),(%d+),(%d+),(%d+)') do
  P[#P + 1], P[#P + 2], P[#P + 3], P[#P + 4], P[#P + 5] = tonumber(kd), tonumber(L), tonumber(a), tonumber(b),
    tonumber(c)
end
local n_parts = #P / 5

-- a reset: every name the key may have, deleted; then a peek of cost 1 on
-- a fresh state (nothing below touches a name of a key not held)
if verb == 'x' then
  redis.call('DEL', unpack(KEYS))
  raw, have, verb, cost = false, true, 'p', 1
end
if not have then raw = redis.call('GET', KEYS[1]) end

-- the state: its configuration, then its numbers v (v[1] the key's time,
-- then each part's, part i's from v[at]: see the loops below)
local v, held_cfg, held = {}, nil, false
if raw then
  local sp = string.find(raw, ' ', 1, true)
  if sp then
    held_cfg = string.sub(raw, 1, sp - 1)
    for w in string.gmatch(string.sub(raw, sp + 1), '%S+') do v[#v + 1] = tonumber(w) end
    held = v[1] ~= nil
  end
end
local eff = now
if held and v[1] > eff then eff = v[1] end -- time never runs backwards
local converting = held and held_cfg ~= cfg

local logs = nil -- part index -> its sorted set's name
if #KEYS > 1 then
  logs = {}
  for j = 2, #KEYS do logs[string.byte(KEYS[j], -1) - 48] = KEYS[j] end
end

-- Part (algorithm algo, limit L, a, b) with its numbers in s from s[at]
-- (a log: its view g) at eff, asked about a request of cost n, changing
-- nothing: each algorithm's decide, not committed. Returns ok, then rem,
-- reset, delay (admitted: as after it), retry (denied), rem_now,
-- reset_now (the state as it is: its peek), and when admitted the
-- numbers a commit writes. A cost above the limit (a shadow part's) is a
-- denial with no retry.
local function ask(algo, L, a, b, s, at, g, n)
  if algo == 1 or algo == 4 then
    local A, B = s[at], s[at + 1]
    if n > L then
      local _, rem_now, reset_now = bucket(L, a, b, false, A, B, eff, 0)
      return false, 0, 0, 0, 0, rem_now, reset_now
    end
    local ok, rem, reset, wait, nA, nB = bucket(L, a, b, algo == 4, A, B, eff, n)
    if not ok then return false, 0, 0, 0, wait, rem, reset end
    local _, rem_now, reset_now = bucket(L, a, b, false, A, B, eff, 0)
    return true, rem, reset, wait, 0, rem_now, reset_now, nA, nB
  elseif algo == 3 then -- fw_at, fw_fill
    local K, cnt = idiv(eff, a), 0
    if s[at + 1] > 0 and s[at] >= K then K, cnt = s[at], s[at + 1] end
    local to_end = (K + 1) * a - eff
    local reset_now = 0
    if cnt > 0 then reset_now = to_end end
    if n <= L and cnt + n <= L then return true, L - cnt - n, to_end, 0, 0, L - cnt, reset_now, K, cnt + n end
    if n > L then to_end = 0 end
    return false, 0, 0, 0, to_end, L - cnt, reset_now
  elseif algo == 2 then -- sw_at, sw_fill, sw_admit_at
    local W, k, pv, cu = a, s[at], s[at + 1], s[at + 2]
    local te = eff
    local empty = pv == 0 and cu == 0
    if not empty and k * W > te then te = k * W end
    local K = idiv(te, W)
    local e = te - K * W
    local P, Cn = 0, 0
    if not empty then
      if K == k + 1 then P = cu elseif K == k then P, Cn = pv, cu end
    end
    local carried = cdiv(P * (W - e), W)
    local rem_now = L - Cn - carried
    if rem_now < 0 then rem_now = 0 end
    local reset_now = 0
    if Cn > 0 then reset_now = (K + 2) * W - eff elseif P > 0 then reset_now = (K + 1) * W - eff end
    if n > L then return false, 0, 0, 0, 0, rem_now, reset_now end
    if P * (W - e) + (Cn + n) * W <= L * W then
      local rem = L - Cn - n - carried
      if rem < 0 then rem = 0 end
      return true, rem, (K + 2) * W - eff, 0, 0, rem_now, reset_now, K, P, Cn + n
    end
    local when = nil
    if Cn + n <= L then -- later in this window, as prev fades
      local x = W - idiv((L - Cn - n) * W, P)
      if x < W then when = K * W + x end
    end
    if not when then -- in the next window, where the previous count is Cn
      local e2 = 0
      if Cn > 0 then e2 = W - idiv((L - n) * W, Cn) end
      if e2 < 0 then e2 = 0 end
      when = (K + 1) * W + e2
    end
    return false, 0, 0, 0, when - eff, rem_now, reset_now
  end
  -- log_fill; a denial's retry: the first entry q whose running total
  -- reaches newest + n - limit (first_cum); at ts_q + W enough has left
  local used = g.used
  local reset_now = 0
  if used > 0 then reset_now = g.newest_ts + a - eff end
  if n > L then return false, 0, 0, 0, 0, L - used, reset_now end
  if used + n <= L then return true, L - used - n, a + g.te - eff, 0, 0, L - used, reset_now end
  -- binary search by rank over the window (ranks count the base, which
  -- sorts first)
  local z = g.z
  local target = g.newest_cum + n - L
  local hi = redis.call('ZCARD', z) - 1
  local first = redis.call('ZRANGEBYSCORE', z, '(' .. num(g.edge), '+inf', 'LIMIT', 0, 1)
  local lo = redis.call('ZRANK', z, first[1])
  while lo < hi do
    local mid = idiv(lo + hi, 2)
    local m = redis.call('ZRANGE', z, mid, mid)
    if tonumber(m[1]) >= target then hi = mid else lo = mid + 1 end
  end
  local q = redis.call('ZRANGE', z, lo, lo, 'WITHSCORES')
  return false, 0, 0, 0, tonumber(q[2]) + a - eff, L - used, reset_now
end

-- ---- sliding logs: their sorted sets ----

local log_view, log_empty, log_trim
if logs or converting then
  -- A log's set z (window W) at eff (log_at): its base and mark, its
  -- newest entry, te, the window's edge (entries at or before it have
  -- left), the cost in the window (used) and the running total before it
  -- (before). The base member also keeps the set from ever being empty
  -- while the key lives, so no command here deletes or creates a name
  -- mid-way (a slot migration refuses both). A key not held reads nothing:
  -- its log is empty, and a set Redis kept of it (its state name evicted)
  -- is cleared at its first admission (clean).
  log_view = function(z, W, is_held)
    local g = {z = z, base = 0, newest_cum = 0, te = eff, used = 0, before = 0, expired = false,
               clean = not is_held}
    if is_held then
      local marks = redis.call('ZRANGEBYSCORE', z, '-inf', '-inf')
      if #marks > 0 then g.mark = marks[1]; g.base = tonumber(string.sub(g.mark, 2)) end
      g.newest_cum, g.before = g.base, g.base
      local last = redis.call('ZRANGE', z, -1, -1, 'WITHSCORES')
      if #last > 0 and last[1] ~= g.mark then g.newest_cum, g.newest_ts = tonumber(last[1]), tonumber(last[2]) end
      if g.newest_ts and g.newest_ts > g.te then g.te = g.newest_ts end
      local expired = redis.call('ZREVRANGEBYSCORE', z, g.te - W, '(-inf', 'LIMIT', 0, 1)
      if #expired > 0 then g.before, g.expired = tonumber(expired[1]), true end
      g.used = g.newest_cum - g.before
    end
    g.edge = g.te - W
    return g
  end
  -- Makes a log's set hold nothing but its base "b0" (an empty log): 1
  -- when it did (the set was there), else 0 (no set: none is made).
  log_empty = function(z)
    if redis.call('EXISTS', z) == 0 then return 0 end
    redis.call('ZADD', z, '-inf', 'b0') -- first, so the set is never empty
    redis.call('ZREMRANGEBYSCORE', z, '(-inf', '+inf')
    redis.call('ZREMRANGEBYLEX', z, '(b0', '+') -- any other base ("b1" ... sort after "b0")
    return 1
  end
  -- Drops what has left the window of view g, its base becoming
  -- new_mark's (by default the running total before the window:
  -- log_carry keeps the entries in it).
  log_trim = function(g, new_mark)
    local z = g.z
    new_mark = new_mark or 'b' .. num(g.before)
    if new_mark ~= g.mark then -- the new one first: never empty
      redis.call('ZADD', z, '-inf', new_mark)
      if g.mark then redis.call('ZREM', z, g.mark) end
    end
    if g.expired then redis.call('ZREMRANGEBYSCORE', z, '(-inf', g.edge) end
  end
end

-- ---- the conversion: a key kept by another configuration of the name ----

local converted = false
if converting then
  -- a configuration's parts: algorithm, limit, a, b, period, from its CFG
  -- (nil: not one this script wrote)
  local function parts_of(text)
    local list = {}
    for part in string.gmatch(text, '[^/]+') do
      local kind, L, a, b, c = string.match(part, '^(%-?%d+),(%d+),(%d+),(%d+),(%d+)$')
      kind = tonumber(kind)
      if not kind or #list == 8 then return nil end
      if kind < 0 then kind = -kind end
      if not WORDS[kind] then return nil end
      list[#list + 1] = {algo = kind, limit = tonumber(L), a = tonumber(a), b = tonumber(b), c = tonumber(c)}
    end
    return list
  end
  local old, new = parts_of(held_cfg), parts_of(cfg) -- (this one's again as a list: conversions only)
  local need, at = 0, 2
  for j, o in ipairs(old or {}) do
    o.at, o.z = at, logs and logs[j - 1]
    at = at + WORDS[o.algo]
    if o.algo == 5 and not o.z then need = need + 2 ^ (j - 1) end
  end
  if not old or at ~= #v + 1 then
    held = false -- no state this script wrote: as if none (its logs cleared at an admission)
  elseif need > 0 then
    return {-1, need}
  else
    for _, o in ipairs(old) do
      if o.algo == 5 then o.g = log_view(o.z, o.a, true) end
    end
    local nv = {v[1]} -- the key's time stays: a conversion is no admission
    for j, pt in ipairs(new) do
      local o, L, algo, z = old[j], pt.limit, pt.algo, logs and logs[j - 1]
      local carried = false
      if o and o.algo == algo and o.c == pt.c then -- the same algorithm and period: carry
        local A, x, y = v[o.at], v[o.at + 1], v[o.at + 2]
        carried = true
        if algo == 1 or algo == 4 then -- the backlog in tokens, rounded up, at most the capacity
          local nA, nB = FRESH, 0
          local b = -1
          if A >= eff then b = (A - eff) * o.b + x end
          if b > 0 then
            local q, pn, po = idiv(b, o.a), pt.a, o.a
            local nb = L * pn
            if q < L then -- ceil(b * pn / po) = q * pn + ceil(rem * pn / po), rem < po < 2^32,
              local rem = b - q * po -- pn < 2^32: in halves of 16 bits, each product < 2^49
              local hi = math.floor(pn / 65536)
              local p1 = rem * hi
              local q1 = idiv(p1, po)
              local p2 = (p1 - q1 * po) * 65536 + rem * (pn - hi * 65536)
              local q2 = idiv(p2, po)
              local up = 0
              if p2 - q2 * po > 0 then up = 1 end
              local back = q * pn + q1 * 65536 + q2 + up
              if back < nb then nb = back end
            end
            local w = idiv(nb, pt.b)
            nA, nB = eff + w, nb - w * pt.b
          end
          nv[#nv + 1], nv[#nv + 2] = nA, nB
        elseif algo == 3 then
          nv[#nv + 1], nv[#nv + 2] = A, math.min(x, L)
        elseif algo == 2 then
          nv[#nv + 1], nv[#nv + 2], nv[#nv + 3] = A, math.min(x, L), math.min(y, L)
        elseif o.g.used <= L then -- the entries in the window, as they are
          if o.g.mark or o.g.newest_ts then log_trim(o.g) end
          nv[#nv + 1] = 0
        else
          carried = false
        end
      end
      if not carried then -- what old part j has in use, admitted into a fresh part
        local used = 0
        if o then
          local _, _, _, _, _, rem_now = ask(o.algo, o.limit, o.a, o.b, v, o.at, o.g, 0)
          used = o.limit - rem_now
        end
        if used > L then used = L end
        if algo == 5 then
          local made = log_empty(z)
          if used >= 1 then
            if made == 0 then redis.call('ZADD', z, '-inf', 'b0') end
            redis.call('ZADD', z, eff, num(used))
          end
          nv[#nv + 1] = 0
        elseif used < 1 then
          if algo == 2 then nv[#nv + 1], nv[#nv + 2], nv[#nv + 3] = 0, 0, 0
          elseif algo == 3 then nv[#nv + 1], nv[#nv + 2] = 0, 0
          else nv[#nv + 1], nv[#nv + 2] = FRESH, 0 end
        elseif algo == 3 then nv[#nv + 1], nv[#nv + 2] = idiv(eff, pt.a), used
        elseif algo == 2 then nv[#nv + 1], nv[#nv + 2], nv[#nv + 3] = idiv(eff, pt.a), 0, used
        else
          local _, _, _, _, nA, nB = bucket(L, pt.a, pt.b, false, FRESH, 0, eff, used)
          nv[#nv + 1], nv[#nv + 2] = nA, nB
        end
      end
    end
    -- the old logs no part of this configuration keeps
    for j, o in ipairs(old) do
      if o.algo == 5 and not (new[j] and new[j].algo == 5) then redis.call('DEL', o.z) end
    end
    v, converted = nv, true
  end
end

-- ---- the call ----

-- a key not held: fresh numbers (a log's 0); the logs' views
if not held then
  v = {eff}
  for i = 1, n_parts do
    local algo = P[5 * i - 4]
    if algo < 0 then algo = -algo end
    if algo == 1 or algo == 4 then v[#v + 1], v[#v + 2] = FRESH, 0
    elseif algo == 2 then v[#v + 1], v[#v + 2], v[#v + 3] = 0, 0, 0
    elseif algo == 3 then v[#v + 1], v[#v + 2] = 0, 0
    else v[#v + 1] = 0 end
  end
end
local gs = nil -- part i -> its log's view
if logs then
  gs = {}
  for i = 1, n_parts do
    local k = 5 * i - 4
    if P[k] == 5 or P[k] == -5 then gs[i] = log_view(logs[i - 1], P[k + 2], held) end
  end
end

local changed = false -- a refund changed the state's numbers
if verb == 'r' then -- every part gives cost back, shadow ones too (each algorithm's refund); then a peek of cost 1
  -- From the newest entry of view g down, while in the window; an entry
  -- left with nothing is removed. Whether the set changed.
  local function log_refund(g, n)
    if g.used == 0 then return false end
    local z = g.z
    local items = redis.call('ZREVRANGE', z, 0, n, 'WITHSCORES') -- enough: each entry holds at least 1
    local i = 1
    while n > 0 and i <= #items do
      local m, score = items[i], items[i + 1]
      if string.byte(m, 1) == 98 or tonumber(score) <= g.edge then break end -- "b": the base, the end
      local cum, lower = tonumber(m), g.base
      local below = items[i + 2]
      if below and string.byte(below, 1) ~= 98 then lower = tonumber(below) end
      local own = cum - lower
      redis.call('ZREM', z, m)
      if own > n then
        redis.call('ZADD', z, score, num(cum - n))
        n = 0
      else
        n = n - own
      end
      i = i + 2
    end
    return true
  end
  local at = 2
  for i = 1, (held and n_parts or 0) do
    local k = 5 * i - 4
    local algo, a, b = P[k], P[k + 2], P[k + 3]
    if algo < 0 then algo = -algo end
    if algo == 1 or algo == 4 then -- TAT past the reading: back by cost, not below it
      if v[at] >= eff then
        local back = (v[at] - eff) * b + v[at + 1]
        if back > 0 then
          back = back - cost * a
          if back < 0 then back = 0 end
          local w = idiv(back, b)
          v[at], v[at + 1], changed = eff + w, back - w * b, true
        end
      end
    elseif algo == 3 then -- the count of the reading's window, down
      if v[at + 1] > 0 and v[at] >= idiv(eff, a) then
        v[at + 1], changed = math.max(v[at + 1] - cost, 0), true
      end
    elseif algo == 2 then -- rolled to the reading's window (sw_at), the current count first
      local k0, pv, cu = v[at], v[at + 1], v[at + 2]
      if pv > 0 or cu > 0 then
        local te = eff
        if k0 * a > te then te = k0 * a end
        local K = idiv(te, a)
        local P, Cn = 0, 0
        if K == k0 + 1 then P = cu elseif K == k0 then P, Cn = pv, cu end
        if P > 0 or Cn > 0 then
          local from_cur = math.min(Cn, cost)
          local from_prev = math.min(P, cost - from_cur)
          v[at], v[at + 1], v[at + 2], changed = K, P - from_prev, Cn - from_cur, true
        end
      end
    elseif log_refund(gs[i], cost) then
      gs[i] = log_view(gs[i].z, a, true)
    end
    at = at + WORDS[algo]
  end
  cost = 1
end

-- Every part asked, changing nothing (the parts loop of
-- sluice__policy_decide), and combined as combine() does, the enforced
-- parts only, both ways at once: A as when every enforced part admits
-- (their fields as after it), B as when one denies (their states as they
-- are, the greatest retry); least remaining (first on a tie) sets limit
-- and part, greatest retry, reset and delay. pend: what the parts that
-- would admit commit. No enforced part: admitted, nothing in force.
local pend = {}
local all, shadow_denied, first = true, 0, true
local remA, limA, partA, prA, resetA, delayA = 1000000000, 0, 0, 0, 0, 0
local remB, limB, partB, prB, resetB, retryB = 1000000000, 0, 0, 0, 0, 0
local ttlA, ttlB = 0, 0 -- the expiry: every part, shadow ones too
local at = 2
for i = 1, n_parts do
  local k = 5 * i - 4
  local algo = P[k]
  local shadow = algo < 0
  if shadow then algo = -algo end
  local L = P[k + 1]
  local ok, rem, reset, delay, retry, rem_now, reset_now, n1, n2, n3 =
    ask(algo, L, P[k + 2], P[k + 3], v, at, gs and gs[i], cost)
  if ok then
    pend[at], pend[at + 1], pend[at + 2] = n1 or 0, n2, n3
    if reset > ttlA then ttlA = reset end
  else
    if reset_now > ttlA then ttlA = reset_now end
    if shadow then shadow_denied = 1 else all = false end
  end
  if reset_now > ttlB then ttlB = reset_now end
  if not shadow then
    if first or rem < remA then remA, limA, partA, prA = rem, L, i - 1, reset end
    if reset > resetA then resetA = reset end
    if delay > delayA then delayA = delay end
    if first or rem_now < remB then remB, limB, partB, prB = rem_now, L, i - 1, reset_now end
    if reset_now > resetB then resetB = reset_now end
    if retry > retryB then retryB = retry end
    first = false
  end
  at = at + WORDS[algo]
end

-- what changes: an admission commits the parts that would admit (shadow
-- ones too); a conversion or a refund writes the state as it now is
local admit = all and verb == 'a'
if admit or converted or changed then
  local ttl = ttlB
  if admit then
    ttl, v[1] = ttlA, eff
    at = 2
    for i = 1, n_parts do
      local algo = P[5 * i - 4]
      if algo < 0 then algo = -algo end
      if pend[at] then
        if algo == 5 then -- log_decide, committed: what left the window dropped, merged or appended
          local g = gs[i]
          local z = g.z
          if g.clean and log_empty(z) == 1 then g.mark = 'b0' end
          local rebase = g.newest_cum + cost > 1125899906842624 -- totals near 2^50: from the base again
          log_trim(g, 'b' .. num(rebase and 0 or g.before))
          local top = g.newest_cum
          if rebase then
            local entries = redis.call('ZRANGEBYSCORE', z, '(-inf', '+inf', 'WITHSCORES')
            redis.call('ZREMRANGEBYSCORE', z, '(-inf', '+inf')
            for e = 1, #entries, 2 do
              redis.call('ZADD', z, entries[e + 1], num(tonumber(entries[e]) - g.before))
            end
            top = top - g.before
          end
          if g.newest_ts == g.te and g.used > 0 then redis.call('ZREM', z, num(top)) end
          redis.call('ZADD', z, g.te, num(top + cost))
        else
          v[at], v[at + 1] = pend[at], pend[at + 1]
          if algo == 2 then v[at + 2] = pend[at + 2] end
        end
      end
      at = at + WORDS[algo]
    end
  end
  local words = {cfg}
  for j = 1, #v do words[j + 1] = num(v[j]) end
  local state = table.concat(words, ' ')
  if admit or converted then -- the expiry covers every part, shadow ones too
    if ttl < 1 then ttl = 1 end
    ttl = ttl + extra_ttl
    if logs then
      for i = 1, n_parts do
        if gs[i] then redis.call('PEXPIRE', gs[i].z, ttl) end
      end
    end
    redis.call('SET', KEYS[1], state, 'PX', ttl)
  else -- a refund: fresh no later than it was
    redis.call('SET', KEYS[1], state, 'KEEPTTL')
  end
end
if all then return {1, remA, 0, resetA, delayA, limA, partA, eff, prA, shadow_denied} end
local reply = {0, remB, retryB, resetB, 0, limB, partB, eff, prB, shadow_denied}
-- ---- a denial's figures, for the cache of denials (store/deny.h) ----
-- A decision denied: after the ten fields, each part's figures, as
-- sluice__deny_parts_of computes them in C: how long it denies cost 1 (0:
-- it admits one now), how long it denies the request's cost (-1: never,
-- a shadow part's cost above its limit), how long until it is fresh (its
-- peek's reset). Asked again here, changing nothing, so that admissions
-- pay nothing for them.
if verb == 'a' then
  at = 2
  for i = 1, n_parts do
    local k = 5 * i - 4
    local algo = P[k]
    if algo < 0 then algo = -algo end
    local L, a, b, g = P[k + 1], P[k + 2], P[k + 3], gs and gs[i]
    local ok, _, _, _, retry, _, reset_now = ask(algo, L, a, b, v, at, g, cost)
    if ok then retry = 0 elseif cost > L then retry = -1 end
    local retry1 = retry
    if cost ~= 1 then
      local ok1, _, _, _, r1 = ask(algo, L, a, b, v, at, g, 1)
      retry1 = ok1 and 0 or r1
    end
    reply[#reply + 1], reply[#reply + 2], reply[#reply + 3] = retry1, retry, reset_now
    at = at + WORDS[algo]
  end
end
return reply
