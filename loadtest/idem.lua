-- wrk script of make loadtest: POST to path with a fresh Idempotency-Key per
-- request (first requests), one fixed key (replays) or no key.
--
--   wrk -s idem.lua http://127.0.0.1:8080 -- fresh|fixed|none <path> <key-prefix> <fixed-key>
--
-- Fresh keys are <key-prefix>-<thread>-<n>: give every run its own prefix.

local threads = 0

function setup(thread)
	threads = threads + 1
	thread:set("tid", threads)
end

function init(args)
	mode = args[1] or "none"
	run = args[3] or tostring(os.time())
	fixed = args[4] or (run .. "-fixed")
	counter = 0
	wrk.method = "POST"
	wrk.path = args[2] or "/orders"
	wrk.body = '{"item":"book","qty":2}'
	wrk.headers["Content-Type"] = "application/json"
	if mode == "fixed" then
		wrk.headers["Idempotency-Key"] = fixed
	end
	static = wrk.format()
end

function request()
	if mode ~= "fresh" then
		return static
	end
	counter = counter + 1
	wrk.headers["Idempotency-Key"] = run .. "-" .. tid .. "-" .. counter
	return wrk.format()
end
