-- wrk script of make loadtest: POST /orders with a fresh Idempotency-Key per
-- request (first requests), one fixed key (replays), no key, or POST /bare
-- (the same handler without the middleware: the baseline).
--
--   wrk -s idem.lua http://127.0.0.1:8080 -- fresh|fixed|none|bare <key-prefix> <fixed-key>
--
-- Fresh keys are <key-prefix>-<thread>-<n>: give every run its own prefix.

local threads = 0

function setup(thread)
	threads = threads + 1
	thread:set("tid", threads)
end

function init(args)
	mode = args[1] or "none"
	run = args[2] or tostring(os.time())
	fixed = args[3] or (run .. "-fixed")
	counter = 0
	wrk.method = "POST"
	wrk.body = '{"item":"book","qty":2}'
	wrk.headers["Content-Type"] = "application/json"
	wrk.path = "/orders"
	if mode == "bare" then
		wrk.path = "/bare"
	elseif mode == "fixed" then
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
