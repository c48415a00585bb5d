package readmetest

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/bunbox/bunbox/internal/outboxtest"
)

// syncBuffer collects a process's output, written and read from different goroutines.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// quickStart is the README's quick start: the first complete program after the "## Quick start" heading.
func quickStart(t *testing.T) block {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(moduleRoot(t), "README.md"))
	require.NoError(t, err)
	heading := 0
	for i, l := range strings.Split(string(data), "\n") {
		if strings.HasPrefix(l, "## Quick start") {
			heading = i + 1
			break
		}
	}
	require.NotZero(t, heading, "README.md has a \"## Quick start\" section")
	for _, b := range parseBlocks(t, "README.md", string(data)) {
		if b.line > heading && b.complete() {
			return b
		}
	}
	t.Fatal("the quick start has no complete program")
	return block{}
}

// buildQuickStart writes the quick start into a directory inside the module (so that its imports resolve
// through the module's go.mod; the leading _ keeps it out of ./...), builds it, and returns the binary.
func buildQuickStart(t *testing.T, b block) string {
	t.Helper()
	root := moduleRoot(t)
	dir, err := os.MkdirTemp(filepath.Join(root, "internal", "readmetest"), "_quickstart")
	require.NoError(t, err)
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	require.NoError(t, os.WriteFile(filepath.Join(dir, "main.go"), []byte(b.source(nil)), 0o644))
	bin := filepath.Join(t.TempDir(), "quickstart")
	rel, err := filepath.Rel(root, dir)
	require.NoError(t, err)
	goCmd(t, root, "build", "-o", bin, "./"+filepath.ToSlash(rel))
	return bin
}

// The quick start, as the README prints it, runs end to end against the real servers: it places an order,
// the relay forwards order.placed, the worker's inbox handler confirms it, and SIGINT stops it cleanly.
func TestQuickStartRuns(t *testing.T) {
	outboxtest.SkipShort(t)
	t.Parallel()
	bin := buildQuickStart(t, quickStart(t))

	schema := outboxtest.NewSchema(t)
	db := outboxtest.Open(t, map[string]any{"search_path": schema})
	sep := "?"
	if strings.Contains(outboxtest.DatabaseURL(), "?") {
		sep = "&"
	}
	rd := outboxtest.StartRedis(t, nil) // a Redis of its own: the worker serves the default queue

	var out syncBuffer
	cmd := exec.Command(bin)
	cmd.Env = append(os.Environ(), "DATABASE_URL="+outboxtest.DatabaseURL()+sep+"search_path="+schema, "REDIS_ADDR="+rd.Addr())
	cmd.Stdout, cmd.Stderr = &out, &out
	require.NoError(t, cmd.Start())
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() { _ = cmd.Process.Kill() }) // after a failure; a no-op once it exited

	count := func(table string) int {
		var n int
		if err := db.NewRaw("SELECT count(*) FROM "+table).Scan(context.Background(), &n); err != nil {
			return -1 // not made yet
		}
		return n
	}
	outboxtest.WaitFor(t, 60*time.Second, "the order confirmed", func() bool {
		select {
		case err := <-exited:
			t.Fatalf("the quick start exited early (%v):\n%s", err, out.String())
		default:
		}
		return count("confirmations") == 1
	})
	require.Equal(t, 1, count("orders"))
	require.Equal(t, 1, count("inbox_events"))
	// The relay commits its cursor's move after the enqueue, so the worker may confirm the order first.
	outboxtest.WaitFor(t, 30*time.Second, "the event delivered", func() bool {
		return outboxtest.CountDelivered(t, db, "") == 1
	})

	require.NoError(t, cmd.Process.Signal(syscall.SIGINT))
	select {
	case err := <-exited:
		require.NoError(t, err, "a clean stop exits 0:\n%s", out.String())
	case <-time.After(60 * time.Second):
		t.Fatalf("the quick start did not stop within 60 s of SIGINT:\n%s", out.String())
	}
	require.Contains(t, out.String(), "order 1 placed")
	require.Contains(t, out.String(), "order 1 of ada confirmed")
	t.Logf("the quick start's output:\n%s", out.String())
}
