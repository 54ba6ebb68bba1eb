-- pgstore's transactional inbox: one row per event applied, written in the
-- transaction of the event's effect. Migrate runs this file with the
-- configured schema and table names (see the package doc of pgstore).
CREATE TABLE IF NOT EXISTS processed_events (
	event_id     text        PRIMARY KEY,
	processed_at timestamptz NOT NULL DEFAULT now()
);
-- For deleting old marks: DELETE FROM processed_events WHERE processed_at < now() - interval '30 days'.
CREATE INDEX IF NOT EXISTS processed_events_processed_at_idx ON processed_events (processed_at);
