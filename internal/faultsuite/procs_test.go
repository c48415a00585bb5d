//go:build fault

package faultsuite

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// proc is one helper process of the suite, started in a process group of its own so that a kill takes
// everything it started, and killed by the kernel if the test binary dies (Pdeathsig).
type proc struct {
	name    string
	bin     string
	args    []string
	logPath string

	mu     sync.Mutex
	cmd    *exec.Cmd
	done   chan struct{}
	starts int
	deaths map[int]time.Time // pid -> when the suite saw the process gone
}

func newProc(t *testing.T, dir, bin, name string, args ...string) *proc {
	t.Helper()
	p := &proc{name: name, bin: bin, args: args, logPath: filepath.Join(dir, name+".out"), deaths: map[int]time.Time{}}
	t.Cleanup(func() { p.kill(t) })
	return p
}

func (p *proc) start(t *testing.T) {
	t.Helper()
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd != nil {
		t.Fatalf("%s already running", p.name)
	}
	out, err := os.OpenFile(p.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		t.Fatalf("log of %s: %v", p.name, err)
	}
	cmd := exec.Command(p.bin, p.args...)
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		_ = out.Close()
		t.Fatalf("start %s: %v", p.name, err)
	}
	done := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		_ = out.Close()
		close(done)
	}()
	p.cmd, p.done = cmd, done
	p.starts++
}

// kill sends SIGKILL to the process group and waits until the process is gone. It is a no-op when the
// process is not running.
func (p *proc) kill(t *testing.T) {
	t.Helper()
	p.signal(syscall.SIGKILL, time.Minute)
}

// stop asks the process to stop (SIGTERM) and kills it when it has not exited within grace.
func (p *proc) stop(t *testing.T, grace time.Duration) {
	t.Helper()
	if !p.signal(syscall.SIGTERM, grace) {
		t.Logf("%s did not stop within %s; killing it", p.name, grace)
		p.kill(t)
	}
}

func (p *proc) signal(sig syscall.Signal, wait time.Duration) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil {
		return true
	}
	_ = syscall.Kill(-p.cmd.Process.Pid, sig)
	select {
	case <-p.done:
	case <-time.After(wait):
		return false
	}
	p.deaths[p.cmd.Process.Pid] = time.Now()
	p.cmd, p.done = nil, nil
	return true
}

// deathTimes returns, for every process this proc ran that is gone, when the suite saw it gone.
func (p *proc) deathTimes() map[int]time.Time {
	p.mu.Lock()
	defer p.mu.Unlock()
	m := make(map[int]time.Time, len(p.deaths))
	for pid, at := range p.deaths {
		m[pid] = at
	}
	return m
}

// wait waits up to timeout for the process to exit on its own.
func (p *proc) wait(timeout time.Duration) bool {
	p.mu.Lock()
	done := p.done
	p.mu.Unlock()
	if done == nil {
		return true
	}
	select {
	case <-done:
		p.mu.Lock()
		p.cmd, p.done = nil, nil
		p.mu.Unlock()
		return true
	case <-time.After(timeout):
		return false
	}
}

func (p *proc) tail(n int) string {
	b, _ := os.ReadFile(p.logPath)
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// buildHelper builds the faultproc binary into dir, with the race detector when FAULT_RACE=1.
func buildHelper(t *testing.T, dir string) string {
	t.Helper()
	goBin := filepath.Join(runtime.GOROOT(), "bin", "go") //nolint:staticcheck // the toolchain running this test, when it still sits where it was built
	if _, err := os.Stat(goBin); err != nil {
		goBin = "go"
	}
	bin := filepath.Join(dir, "faultproc")
	args := []string{"build", "-o", bin}
	if os.Getenv("FAULT_RACE") == "1" {
		args = append(args, "-race")
	}
	args = append(args, "./faultproc")
	start := time.Now()
	out, err := exec.Command(goBin, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("go %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	t.Logf("built %s in %s", bin, time.Since(start).Round(time.Millisecond))
	return bin
}

// readLines calls fn with the fields of every line of the files matching pattern.
func readLines(t *testing.T, pattern string, fn func(file string, fields []string)) {
	t.Helper()
	files, err := filepath.Glob(pattern)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		fh, err := os.Open(f)
		if err != nil {
			t.Fatal(err)
		}
		sc := bufio.NewScanner(fh)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			if fields := strings.Fields(sc.Text()); len(fields) > 0 {
				fn(filepath.Base(f), fields)
			}
		}
		_ = fh.Close()
		if err := sc.Err(); err != nil {
			t.Fatal(err)
		}
	}
}
