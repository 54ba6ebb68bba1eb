-- RunID: the run_id of the server that holds KEYS[1] (INFO server), then
-- its master_replid (INFO replication), which changes when it is promoted
-- (REPLICAOF NO ONE, a failover): a server that took another's data as its
-- replica, then was promoted, keeps its run_id but not its replication ID.
local server = redis.call('INFO', 'server')
local repl = redis.call('INFO', 'replication')
return (string.match(server, 'run_id:(%x+)') or '') .. ' ' .. (string.match(repl, 'master_replid:(%x+)') or '')
