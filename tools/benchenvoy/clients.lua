-- wrk script for tools/benchenvoy: every request carries a client id header
-- (the first argument after "--" is the header name). Two loads:
--
--   header id...             rotate over the given ids. The requests are
--                            formatted once in init, so the per-request Lua
--                            work is an index and a return, not a string build.
--   header --flood P N [twice]
--                            ids P1 ... PN, built per request (too many to
--                            format in advance), visited in order from a
--                            random starting point, so that each run meets
--                            ids the filter has mostly not seen lately;
--                            with twice, each id twice in a row.
--
-- done prints one machine-readable line that the Go side parses; wrk's own
-- human summary is ignored.

local requests = {}
local next_index = 0
local header, flood_prefix, flood_count
local repeats, sent = 1, 0

function init(args)
	header = args[1]
	if args[2] == "--flood" then
		flood_prefix, flood_count = args[3], tonumber(args[4])
		if flood_prefix == nil or flood_count == nil or flood_count < 1 then
			error("clients.lua: --flood wants a prefix and a count")
		end
		if args[5] == "twice" then
			repeats = 2
		end
		math.randomseed(os.time())
		next_index = math.random(flood_count) - 1
		return
	end
	for i = 2, #args do
		requests[#requests + 1] = wrk.format("GET", "/", { [header] = args[i] })
	end
	if #requests == 0 then
		error("clients.lua: no client ids given after the header name")
	end
end

function request()
	if flood_count then
		if sent % repeats == 0 then
			next_index = next_index % flood_count + 1
		end
		sent = sent + 1
		return wrk.format("GET", "/", { [header] = flood_prefix .. next_index })
	end
	next_index = next_index % #requests + 1
	return requests[next_index]
end

function done(summary, latency, _)
	local e = summary.errors
	io.write(string.format(
		"benchenvoy: requests=%d duration_us=%d connect=%d read=%d write=%d timeout=%d non2xx3xx=%d p50_us=%d p99_us=%d p999_us=%d\n",
		summary.requests, summary.duration, e.connect, e.read, e.write, e.timeout, e.status,
		latency:percentile(50), latency:percentile(99), latency:percentile(99.9)))
end
