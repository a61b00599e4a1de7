-- wrk script for tools/benchenvoy: every request carries a client id header,
-- rotating over the ids given after "--" (the first argument is the header
-- name). The requests are formatted once in init, so the per-request Lua
-- work is an index and a return, not a string build.
--
-- done prints one machine-readable line that the Go side parses; wrk's own
-- human summary is ignored.

local requests = {}
local next_index = 0

function init(args)
	local header = args[1]
	for i = 2, #args do
		requests[#requests + 1] = wrk.format("GET", "/", { [header] = args[i] })
	end
	if #requests == 0 then
		error("clients.lua: no client ids given after the header name")
	end
end

function request()
	next_index = next_index % #requests + 1
	return requests[next_index]
end

function done(summary, latency, _)
	local e = summary.errors
	io.write(string.format(
		"benchenvoy: requests=%d duration_us=%d connect=%d read=%d write=%d timeout=%d non2xx3xx=%d p50_us=%d p99_us=%d\n",
		summary.requests, summary.duration, e.connect, e.read, e.write, e.timeout, e.status,
		latency:percentile(50), latency:percentile(99)))
end
