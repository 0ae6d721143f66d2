-- A deterministic Lua workload for the Lua interpreter built under hakmem
-- (tests/test_realprog_more.py): strings, tables, closures, coroutines, the garbage
-- collector. Its output depends only on the program (pairs() order is never printed
-- unsorted; the random generator gets a fixed seed).
math.randomseed(42)

local function checksum(s)
  local h = 0
  for i = 1, #s, 7 do h = (h * 31 + s:byte(i)) % 4294967291 end
  return h
end

-- strings: building, gsub, patterns, formats
local parts = {}
for i = 1, 200000 do parts[#parts + 1] = string.format("%d:%x;", i, i * 2654435761 % 4294967296) end
local big = table.concat(parts)
print("concat", #big, checksum(big))
local n = 0
for a, b in big:gmatch("(%d+):(%x+);") do if #b == 8 then n = n + 1 end end
print("gmatch 8-digit hex", n)
local replaced, count = big:sub(1, 100000):gsub("%d", function(d) return d == "7" and "seven" or nil end)
print("gsub", count, #replaced, checksum(replaced))
print("rep", #string.rep("ab", 1000000, ","), checksum(string.rep("xyz", 300000)))

-- tables: random keys, sort, removal, holes
local t = {}
for i = 1, 300000 do t[i] = math.random(1, 1000000) end
table.sort(t)
print("sorted", t[1], t[150000], t[300000])
local words = {}
for i = 1, 50000 do
  local w = {}
  for k = 1, math.random(3, 12) do w[k] = string.char(96 + math.random(1, 26)) end
  words[i] = table.concat(w)
end
local freq = {}
for _, w in ipairs(words) do local c = w:sub(1, 2); freq[c] = (freq[c] or 0) + 1 end
local keys = {}
for k in pairs(freq) do keys[#keys + 1] = k end
table.sort(keys, function(a, b) if freq[a] ~= freq[b] then return freq[a] > freq[b] end return a < b end)
for i = 1, 5 do io.write(keys[i], "=", freq[keys[i]], i < 5 and " " or "\n") end
for i = 1, 100000 do t[i] = nil end
local live = 0
for _, v in pairs(t) do live = live + 1 end
print("after removal", live)

-- closures and objects with metatables, churned through the collector
local Vec = {}
Vec.__index = Vec
Vec.__add = function(a, b) return setmetatable({x = a.x + b.x, y = a.y + b.y}, Vec) end
local function vec(x, y) return setmetatable({x = x, y = y}, Vec) end
local acc = vec(0, 0)
for i = 1, 300000 do acc = acc + vec(i % 7, i % 11) end
print("vector sum", acc.x, acc.y)
local counters = {}
for i = 1, 1000 do local c = 0; counters[i] = function() c = c + i; return c end end
local total = 0
for r = 1, 100 do for i = 1, 1000 do total = total + counters[i]() end end
print("closures", total)

-- coroutines: a generator pipeline
local function gen(nmax) return coroutine.wrap(function() for i = 1, nmax do coroutine.yield(i) end end) end
local function filter(src, pred) return coroutine.wrap(function() for v in src do if pred(v) then coroutine.yield(v) end end end) end
local s = 0
for v in filter(gen(200000), function(v) return v % 3 == 0 end) do s = s + v end
print("coroutines", s)
local cos = {}
for i = 1, 2000 do cos[i] = coroutine.create(function(a) local b = coroutine.yield(a * 2); return a + b end) end
local cs = 0
for i = 1, 2000 do local _, v = coroutine.resume(cos[i], i); local _, w = coroutine.resume(cos[i], v); cs = cs + w end
print("coroutine objects", cs)

-- the collector: big garbage, weak tables, finalizers
local weak = setmetatable({}, {__mode = "v"})
for i = 1, 1000 do weak[i] = {i} end
local finalized = 0
for i = 1, 1000 do setmetatable({}, {__gc = function() finalized = finalized + 1 end}) end
for r = 1, 20 do local junk = {}; for i = 1, 20000 do junk[i] = {i, tostring(i)} end end
collectgarbage("collect")
collectgarbage("collect")
local alive = 0
for _ in pairs(weak) do alive = alive + 1 end
print("weak survivors", alive, "finalized", finalized)
print("utf8", utf8.len("h\u{e9}llo w\u{f6}rld \u{1F600}"), utf8.char(72, 228, 8364))
print("done")
