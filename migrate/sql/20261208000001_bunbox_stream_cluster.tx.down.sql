ALTER TABLE bunbox_stream DROP COLUMN IF EXISTS max_id;
ALTER TABLE bunbox_stream DROP COLUMN IF EXISTS system_id;
