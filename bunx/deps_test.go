package bunx_test

import (
	"os/exec"
	"strings"
	"testing"
)

// TestProducerSideIsLight keeps what a domain-model package links small: bunx (and model, which it imports)
// link no asynq, no Redis client and no database driver, so embedding bunx.Hooks in a model costs bun and
// little else. The worker side lives in package worker; the driver-specific error reading in internal/pgerr
// names no driver. A failure lists what came in and through which import.
func TestProducerSideIsLight(t *testing.T) {
	t.Parallel()
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Skipf("the go command is not on PATH: %v", err)
	}
	out, err := exec.Command(goBin, "list", "-deps", "github.com/bunbox/bunbox/bunx", "github.com/bunbox/bunbox/model").CombinedOutput()
	if err != nil {
		t.Fatalf("go list -deps: %v\n%s", err, out)
	}
	forbidden := []string{
		"github.com/hibiken/asynq",
		"github.com/redis/go-redis",
		"github.com/uptrace/bun/driver/pgdriver",
		"github.com/jackc/pgx",
		"github.com/bunbox/bunbox/worker",
		"github.com/bunbox/bunbox/relay",
		"github.com/bunbox/bunbox/connect",
	}
	for _, dep := range strings.Fields(string(out)) {
		for _, f := range forbidden {
			if dep == f || strings.HasPrefix(dep, f+"/") {
				t.Errorf("bunx links %s; find the import with: go list -deps -f '{{.ImportPath}}: {{.Imports}}' ./bunx | grep %s", dep, f)
			}
		}
	}
}
