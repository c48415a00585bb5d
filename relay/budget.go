package relay

// claimBudgetSQL is claimSQL that also stops at a byte budget: of the rows claimSQL locks, in id order, it
// returns the longest run whose payload and metadata fit in the budget, and always the first row, however
// large. Since the run is a prefix in id order, it is the rows up to a cutoff id, so the query returns
// claimSQL's own columns, whatever they are. The rows locked beyond the budget are released when the
// round's transaction ends. Arguments: the batch size, then the budget in bytes.
//
// A row's size is the JSON text the relay receives (octet_length of the text form) for a value PostgreSQL
// stored compressed, whose stored size could be a tiny part of it; for any other value it is the stored
// size (pg_column_size), which is close to the text's and costs no conversion: most rows are small and
// stored as they are. pg_column_compression needs PostgreSQL 14 or later.
const claimBudgetSQL = `WITH claimed AS MATERIALIZED (
` + claimSQL + `
)
SELECT * FROM claimed WHERE id <= (
  SELECT max(id) FROM (
    SELECT id, row_number() OVER w AS n, sum(` + rowSizeSQL + `) OVER w AS running
    FROM claimed WINDOW w AS (ORDER BY id)
  ) sized
  WHERE n = 1 OR running <= ?
)
ORDER BY id`

// rowSizeSQL is the size in bytes of a claimed row's payload and metadata; see claimBudgetSQL.
const rowSizeSQL = `CASE WHEN pg_column_compression(payload) IS NULL THEN pg_column_size(payload)
    ELSE octet_length(payload::text) END
  + CASE WHEN pg_column_compression(metadata) IS NULL THEN pg_column_size(metadata)
    ELSE octet_length(metadata::text) END`
