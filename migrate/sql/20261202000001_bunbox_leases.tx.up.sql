-- Leases: one holder at a time for work that only one process should do (the reconciler that each relay
-- runs). A lease is taken or renewed by one statement (UPDATE ... WHERE expires_at < now() OR holder = me),
-- never by a session lock, so a transaction pooler cannot strand it: a holder that dies stops renewing, and
-- another takes the lease once expires_at has passed.
CREATE TABLE IF NOT EXISTS bunbox_leases (
    name       text        PRIMARY KEY,
    holder     text        NOT NULL,
    expires_at timestamptz NOT NULL
);
