package outboxtest

import (
	"fmt"
	"path/filepath"
	"strconv"
	"testing"
)

// SetNextXid stops the cluster, sets its next transaction id with pg_resetwal -x, and starts it again: a
// cluster whose counter is ahead of or behind another's, as after a move to a cluster of another age. xid
// must be a multiple of 1048576 (a pg_xact segment's first id, as pg_resetwal's manual asks) past the
// counter's wraparound-safe start.
func (p *Postgres) SetNextXid(tb testing.TB, xid uint64) {
	tb.Helper()
	if xid%1048576 != 0 {
		tb.Fatalf("SetNextXid(%d): not a multiple of 1048576", xid)
	}
	p.Stop(tb)
	if out, err := p.command(filepath.Join(p.bin, "pg_resetwal"), "-x", strconv.FormatUint(xid, 10),
		"-D", p.dataDir()).CombinedOutput(); err != nil {
		tb.Fatalf("pg_resetwal -x %d: %v\n%s", xid, err, out)
	}
	p.Start(tb)
}

// RestoreInto copies the cluster's postgres database into to's, as a move to another cluster does:
// pg_dump -Fc here, pg_restore there (to's postgres database must hold none of its tables).
func (p *Postgres) RestoreInto(tb testing.TB, to *Postgres) {
	tb.Helper()
	file := filepath.Join(p.dir, "move.dump")
	if out, err := p.command(filepath.Join(p.bin, "pg_dump"), "-Fc", "-f", file, p.URL()).CombinedOutput(); err != nil {
		tb.Fatalf("pg_dump: %v\n%s", err, out)
	}
	if out, err := p.command(filepath.Join(p.bin, "pg_restore"), "--no-owner", "--exit-on-error",
		"-d", to.URL(), file).CombinedOutput(); err != nil {
		tb.Fatalf("pg_restore: %v\n%s", err, out)
	}
}

// NextXid returns the cluster's next transaction id, as pg_current_snapshot's xmax says it.
func (p *Postgres) NextXid(tb testing.TB) uint64 {
	tb.Helper()
	db := p.Open(tb, nil)
	defer db.Close()
	var s string
	if err := db.QueryRow("SELECT pg_snapshot_xmax(pg_current_snapshot())::text").Scan(&s); err != nil {
		tb.Fatalf("next xid: %v", err)
	}
	n, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		tb.Fatal(fmt.Errorf("next xid %q: %w", s, err))
	}
	return n
}
