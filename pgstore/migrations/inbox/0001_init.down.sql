DROP TABLE IF EXISTS processed_events;
