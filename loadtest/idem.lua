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
	elseif mode == "fresh" then
		-- The request is formatted once around a placeholder and split, so
		-- that a fresh key costs one concatenation rather than a wrk.format
		-- per request: the load generator shares the server's cores, and
		-- the time it spends building requests is taken from the server.
		wrk.headers["Idempotency-Key"] = "\0"
		head, tail = wrk.format():match("^(.-)%z(.*)$")
		head = head .. run .. "-" .. tid .. "-"
	end
	static = wrk.format()
end

function request()
	if mode ~= "fresh" then
		return static
	end
	counter = counter + 1
	return head .. counter .. tail
end
