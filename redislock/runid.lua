-- RunID: the run_id of the server that holds KEYS[1] (INFO server), then
-- its master_replid (INFO replication), which changes when it is promoted
-- (REPLICAOF NO ONE, a failover): a server that took another's data as its
-- replica, then was promoted, keeps its run_id but not its replication ID.
local run = string.match(redis.call('INFO', 'server'), 'run_id:(%x+)')
local repl = string.match(redis.call('INFO', 'replication'), 'master_replid:(%x+)')
if not run or not repl then
	return redis.error_reply('INFO has no run_id or master_replid')
end
return run .. ' ' .. repl
