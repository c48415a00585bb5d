package relay

// claimBudgetSQL is claimSQL that also stops at a byte budget: of the rows claimSQL locks, in id order, it
// returns the longest run whose payload and metadata (as the JSON text the relay receives) fit in the
// budget, and always the first row, however large. The rows locked beyond the budget are released when
// the round's transaction ends. Arguments: the batch size, then the budget in bytes.
const claimBudgetSQL = `WITH claimed AS MATERIALIZED (
` + claimSQL + `
), sized AS (
  SELECT id, row_number() OVER w AS n,
    sum(octet_length(payload::text) + octet_length(metadata::text)) OVER w AS running
  FROM claimed
  WINDOW w AS (ORDER BY id)
)
SELECT claimed.* FROM claimed JOIN sized USING (id)
WHERE sized.n = 1 OR sized.running <= ?
ORDER BY id`
