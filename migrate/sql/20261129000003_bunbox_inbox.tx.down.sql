DROP TABLE IF EXISTS inbox_events;
