DROP TABLE IF EXISTS bunbox_stream_marks;
