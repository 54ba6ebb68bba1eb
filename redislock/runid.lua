-- RunID: the run_id of the server that holds KEYS[1] (INFO server).
local info = redis.call('INFO', 'server')
return string.match(info, 'run_id:(%x+)') or ''
