//go:build fault

package faultsuite

import (
	"context"
	"fmt"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/uptrace/bun"
)

// keyedRun is one run of an account.changed handler, from the ks/ke lines of a worker's ledger.
type keyedRun struct {
	task, account string
	seq           int64
	pid           int
	start, end    time.Time
	ok, cut       bool // cut: no ke line, the process died mid-run; end is when it was seen dead
}

// orderingResult is what the ledger says about per-key ordering.
type orderingResult struct {
	runs, cut       int
	concurrent      []string // runs of one account that overlapped
	outOfOrder      []string // runs that started before the previous event of the account succeeded, or after a later one started
	dbViolations    int      // handlers that found the account's handled_seq other than their number minus one
	accountsBehind  int      // accounts whose handled_seq is not their seq at the end
	unknownDeath    int      // cut runs of a process whose death the suite did not see (counted as never ending)
	keyedCommitted  int
	accountsChecked int
}

// checkOrdering reads the keyed runs from the workers' ledgers and checks, per account, that no two runs
// overlapped (a run cut by a SIGKILL lasts until its process was seen dead: the kill ends it, and asynq
// hands its task out again only after the lease expired) and that each run of event n started after a run
// of event n-1 had succeeded, and never after a run of a later event had started.
func checkOrdering(t *testing.T, db *bun.DB, dir string, deaths map[int]time.Time, l *ledger) orderingResult {
	t.Helper()
	var res orderingResult
	for _, name := range l.expected {
		if name == "account.changed" {
			res.keyedCommitted++
		}
	}
	type runKey struct {
		task string
		pid  int
	}
	var runs []*keyedRun
	open := map[runKey]*keyedRun{}
	parseTime := func(s string) time.Time { n, _ := strconv.ParseInt(s, 10, 64); return time.Unix(0, n) }
	readLines(t, filepath.Join(dir, "deliveries-*.log"), func(_ string, f []string) {
		switch f[0] {
		case "ks":
			seq, _ := strconv.ParseInt(f[3], 10, 64)
			pid, _ := strconv.Atoi(f[4])
			r := &keyedRun{task: f[1], account: f[2], seq: seq, pid: pid, start: parseTime(f[5])}
			if prev := open[runKey{r.task, pid}]; prev != nil {
				res.concurrent = append(res.concurrent, fmt.Sprintf("%s #%d: two runs at once in pid %d", r.account, seq, pid))
			}
			open[runKey{r.task, pid}] = r
			runs = append(runs, r)
		case "ke":
			pid, _ := strconv.Atoi(f[4])
			k := runKey{f[1], pid}
			if r := open[k]; r != nil {
				r.end, r.ok = parseTime(f[5]), f[6] == "true"
				delete(open, k)
			}
		}
	})
	far := time.Now().Add(24 * time.Hour)
	for _, r := range open {
		r.cut = true
		res.cut++
		if d, ok := deaths[r.pid]; ok {
			r.end = d
		} else {
			r.end = far
			res.unknownDeath++
		}
	}
	res.runs = len(runs)

	byAccount := map[string][]*keyedRun{}
	for _, r := range runs {
		byAccount[r.account] = append(byAccount[r.account], r)
	}
	for account, rs := range byAccount {
		sort.Slice(rs, func(i, j int) bool { return rs[i].start.Before(rs[j].start) })
		firstOK := map[int64]time.Time{} // seq -> end of its first successful run
		for _, r := range rs {
			if r.ok && (firstOK[r.seq].IsZero() || r.end.Before(firstOK[r.seq])) {
				firstOK[r.seq] = r.end
			}
		}
		var busyUntil time.Time
		var busyWith *keyedRun
		var maxSeq int64
		for _, r := range rs {
			if r.start.Before(busyUntil) {
				res.concurrent = append(res.concurrent, fmt.Sprintf("%s: #%d (%s, pid %d) started while #%d (pid %d, cut %t) ran",
					account, r.seq, r.task, r.pid, busyWith.seq, busyWith.pid, busyWith.cut))
			}
			if r.end.After(busyUntil) {
				busyUntil, busyWith = r.end, r
			}
			if r.seq > 1 {
				if prev := firstOK[r.seq-1]; prev.IsZero() || r.start.Before(prev) {
					res.outOfOrder = append(res.outOfOrder, fmt.Sprintf("%s: #%d started before #%d succeeded", account, r.seq, r.seq-1))
				}
			}
			if r.seq < maxSeq {
				res.outOfOrder = append(res.outOfOrder, fmt.Sprintf("%s: #%d ran after #%d had started", account, r.seq, maxSeq))
			}
			maxSeq = max(maxSeq, r.seq)
		}
	}
	ctx := context.Background()
	must(t, db.NewRaw("SELECT count(*) FROM fault_order_violations").Scan(ctx, &res.dbViolations))
	must(t, db.NewRaw("SELECT count(*) FROM fault_accounts WHERE handled_seq <> seq").Scan(ctx, &res.accountsBehind))
	must(t, db.NewRaw("SELECT count(*) FROM fault_accounts WHERE seq > 0").Scan(ctx, &res.accountsChecked))
	return res
}

func (o orderingResult) assert(t *testing.T) {
	t.Helper()
	show := func(s []string) []string { return s[:min(5, len(s))] }
	if len(o.concurrent) > 0 {
		t.Errorf("runs of one ordering key overlapped: %d, e.g. %v", len(o.concurrent), show(o.concurrent))
	}
	if len(o.outOfOrder) > 0 {
		t.Errorf("runs of one ordering key out of order: %d, e.g. %v", len(o.outOfOrder), show(o.outOfOrder))
	}
	if o.dbViolations > 0 {
		t.Errorf("handlers that found their account's previous event not yet applied: %d", o.dbViolations)
	}
	if o.accountsBehind > 0 {
		t.Errorf("accounts whose events were not all applied: %d", o.accountsBehind)
	}
	if o.unknownDeath > 0 {
		t.Errorf("cut handler runs of a process the suite did not see die: %d", o.unknownDeath)
	}
}

func (o orderingResult) table() string {
	var b strings.Builder
	row := func(k, format string, args ...any) {
		fmt.Fprintf(&b, "| %-28s | %-72s |\n", k, fmt.Sprintf(format, args...))
	}
	row("keyed (ordering key)", "%d account.changed events over %d accounts, %d handler runs (%d cut by SIGKILL)",
		o.keyedCommitted, o.accountsChecked, o.runs, o.cut)
	row("ordering violations", "overlapping %d, out of order %d, found by the handlers %d, accounts behind %d",
		len(o.concurrent), len(o.outOfOrder), o.dbViolations, o.accountsBehind)
	return b.String()
}

// completedBefore returns the ids of the keyed events the relays saw completed before at, the moment
// Redis lost its data: their tasks went with it, and by design nothing delivers them again (a second
// run of event n after event n+1 would break the key's order, and the first run is known to have
// succeeded), so the suite does not expect their tasks in Redis at the end.
func completedBefore(ctx context.Context, db *bun.DB, at time.Time) (map[string]bool, error) {
	done := map[string]bool{}
	if at.IsZero() {
		return done, nil
	}
	var ids []string
	if err := db.NewRaw("SELECT event_id::text FROM outbox_events WHERE completed_at < ?", at).Scan(ctx, &ids); err != nil {
		return nil, err
	}
	for _, id := range ids {
		done[id] = true
	}
	return done, nil
}
