package outboxtest

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/bunbox/bunbox/model"
	"github.com/uptrace/bun"
)

// Private servers for fault tests: a test that stops or restarts a server starts its own, on a free
// loopback port, so the shared servers of the other (parallel) tests are never disturbed. Each handle
// keeps its port and data across Stop and Start, and everything is stopped and deleted in tb.Cleanup.
//
//	rd := outboxtest.StartRedis(t, nil)          // redis-server with appendonly: a restart keeps the data
//	pg := outboxtest.StartPostgres(t)            // a PostgreSQL cluster of its own (initdb takes ~2 s)
//	db := pg.Schema(t)                           // a pool on it, with bunbox's schema applied
//	rd.Stop(t); ...; rd.Start(t)                 // an outage, then recovery on the same address
//
// Starting a server that is missing skips the test under -short and fails it otherwise.

// RedisOptions tunes StartRedis; nil means the defaults.
type RedisOptions struct {
	// NoPersistence disables the append-only file: a restart then starts empty, like losing Redis.
	NoPersistence bool
	// Password, when set, is required from clients (requirepass); reach the server with a URL such as
	// redis://:PASSWORD@ADDR. Defaults to none.
	Password string
}

// Redis is a private redis-server process.
type Redis struct {
	dir   string
	port  int
	opts  RedisOptions
	extra []string // more redis-server arguments (a Cluster node's)

	mu  sync.Mutex
	cmd *exec.Cmd
	out *os.File
}

// StartRedis starts a private redis-server with the append-only file on (fsync always), so that an
// acknowledged write survives Stop and Start.
func StartRedis(tb testing.TB, opts *RedisOptions) *Redis {
	tb.Helper()
	SkipShort(tb)
	if _, err := exec.LookPath("redis-server"); err != nil {
		tb.Fatalf("redis-server not found (%v): scripts/devservices.sh up installs it", err)
	}
	dir, err := os.MkdirTemp("", "bunbox-redis-")
	if err != nil {
		tb.Fatalf("redis dir: %v", err)
	}
	r := &Redis{dir: dir, port: freePort(tb)}
	if opts != nil {
		r.opts = *opts
	}
	tb.Cleanup(func() {
		r.kill()
		_ = os.RemoveAll(dir)
	})
	r.Start(tb)
	return r
}

// Addr is the server's host:port; it stays the same across Stop and Start.
func (r *Redis) Addr() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(r.port)) }

// Start starts the server (again) and waits until it answers PING, after loading its data.
func (r *Redis) Start(tb testing.TB) {
	tb.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.cmd != nil {
		tb.Fatalf("redis on %s is already running", r.Addr())
	}
	appendonly := "yes"
	if r.opts.NoPersistence {
		appendonly = "no"
	}
	out, err := os.OpenFile(filepath.Join(r.dir, "redis.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		tb.Fatalf("redis log: %v", err)
	}
	args := []string{"--port", strconv.Itoa(r.port), "--bind", "127.0.0.1", "--dir", r.dir,
		"--appendonly", appendonly, "--appendfsync", "always", "--save", "",
		"--daemonize", "no", "--protected-mode", "no"}
	if r.opts.Password != "" {
		args = append(args, "--requirepass", r.opts.Password)
	}
	args = append(args, r.extra...)
	cmd := exec.Command("redis-server", args...)
	cmd.Stdout, cmd.Stderr = out, out
	// Pdeathsig: a test binary killed by -timeout takes its server down with it, instead of leaking it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		_ = out.Close()
		tb.Fatalf("start redis-server: %v", err)
	}
	r.cmd, r.out = cmd, out
	deadline := time.Now().Add(30 * time.Second)
	for !redisPing(r.Addr(), r.opts.Password) {
		if time.Now().After(deadline) {
			tb.Fatalf("redis on %s did not answer within 30s; log: %s", r.Addr(), tail(filepath.Join(r.dir, "redis.log")))
		}
		time.Sleep(10 * time.Millisecond) // a poll step while the server boots
	}
}

// Stop shuts the server down cleanly (SIGTERM: the append-only file is flushed) and waits for it to exit.
func (r *Redis) Stop(tb testing.TB) {
	tb.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.cmd == nil {
		tb.Fatalf("redis on %s is not running", r.Addr())
	}
	_ = r.cmd.Process.Signal(syscall.SIGTERM)
	_ = r.cmd.Wait()
	_ = r.out.Close()
	r.cmd, r.out = nil, nil
}

// Freeze stops the server process (SIGSTOP) until the returned func resumes it (SIGCONT): connections
// stay open and nothing answers, as with a hung server. The test's cleanup resumes it too.
func (r *Redis) Freeze(tb testing.TB) (thaw func()) {
	tb.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.cmd == nil {
		tb.Fatalf("redis on %s is not running", r.Addr())
	}
	p := r.cmd.Process
	if err := p.Signal(syscall.SIGSTOP); err != nil {
		tb.Fatalf("freeze redis: %v", err)
	}
	var once sync.Once
	thaw = func() { once.Do(func() { _ = p.Signal(syscall.SIGCONT) }) }
	tb.Cleanup(thaw)
	return thaw
}

func (r *Redis) kill() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.cmd == nil {
		return
	}
	_ = r.cmd.Process.Kill()
	_ = r.cmd.Wait()
	_ = r.out.Close()
	r.cmd, r.out = nil, nil
}

// redisPing reports whether a Redis server answers PING with PONG (not LOADING) on addr, after AUTH
// with password if it is not empty.
func redisPing(addr, password string) bool {
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return false
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(time.Second))
	rd := bufio.NewReader(c)
	if password != "" {
		if _, err := fmt.Fprintf(c, "*2\r\n$4\r\nAUTH\r\n$%d\r\n%s\r\n", len(password), password); err != nil {
			return false
		}
		if line, err := rd.ReadString('\n'); err != nil || !strings.HasPrefix(line, "+OK") {
			return false
		}
	}
	if _, err := c.Write([]byte("PING\r\n")); err != nil {
		return false
	}
	line, err := rd.ReadString('\n')
	return err == nil && strings.HasPrefix(line, "+PONG")
}

// Postgres is a private PostgreSQL cluster, owned by the postgres user when the tests run as root
// (initdb refuses root).
type Postgres struct {
	bin  string
	dir  string // 0755, owned by the cluster's user; holds data/, the socket and the log
	port int
	cred *syscall.Credential

	config []string // extra -c name=value settings, sorted

	mu      sync.Mutex
	running bool
}

// PostgresOptions tunes StartPostgresWith.
type PostgresOptions struct {
	// Files are written to the data directory after initdb, before the first start, owned by the server's
	// user with mode 0600: certificates and keys (name them in Config, relative to the data directory),
	// or a pg_hba.conf that replaces initdb's.
	Files map[string][]byte
	// Config holds server settings passed as -c name=value at every start, such as
	// {"ssl": "on", "ssl_cert_file": "server.crt", "ssl_key_file": "server.key"}.
	Config map[string]string
}

// StartPostgres creates a cluster with initdb (trust authentication, user postgres) in a fresh directory
// under the system temp dir and starts it on a free loopback port. fsync stays on: a restart keeps what
// the server acknowledged.
func StartPostgres(tb testing.TB) *Postgres {
	tb.Helper()
	return StartPostgresWith(tb, PostgresOptions{})
}

// StartPostgresWith is StartPostgres with files in the data directory and extra server settings.
func StartPostgresWith(tb testing.TB, opts PostgresOptions) *Postgres {
	tb.Helper()
	SkipPooled(tb, "a private PostgreSQL server is reached directly, not through the pooler: the direct pass runs this test")
	SkipShort(tb)
	bin, err := pgBin()
	if err != nil {
		tb.Fatal(err)
	}
	// Not tb.TempDir(): its parents may be closed to the postgres user.
	dir, err := os.MkdirTemp("", "bunbox-pg-")
	if err != nil {
		tb.Fatalf("postgres dir: %v", err)
	}
	p := &Postgres{bin: bin, dir: dir, port: freePort(tb)}
	tb.Cleanup(func() {
		p.mu.Lock()
		if p.running {
			_ = p.pgctl("stop", "-m", "immediate", "-w")
			p.running = false
		}
		p.mu.Unlock()
		_ = os.RemoveAll(dir)
	})
	if err := os.Chmod(dir, 0o755); err != nil {
		tb.Fatalf("chmod %s: %v", dir, err)
	}
	if os.Geteuid() == 0 {
		u, err := user.Lookup("postgres")
		if err != nil {
			tb.Fatalf("running as root, but there is no postgres user to own the cluster: %v", err)
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		p.cred = &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}
		if err := os.Chown(dir, uid, gid); err != nil {
			tb.Fatalf("chown %s: %v", dir, err)
		}
	}
	if out, err := p.command(filepath.Join(bin, "initdb"), "-D", p.dataDir(), "-U", "postgres",
		"--auth=trust", "-E", "UTF8", "--no-instructions", "--no-sync").CombinedOutput(); err != nil {
		tb.Fatalf("initdb: %v\n%s", err, out)
	}
	for name, b := range opts.Files {
		path := filepath.Join(p.dataDir(), name)
		if err := os.WriteFile(path, b, 0o600); err != nil {
			tb.Fatalf("write %s: %v", path, err)
		}
		if p.cred != nil {
			if err := os.Chown(path, int(p.cred.Uid), int(p.cred.Gid)); err != nil {
				tb.Fatalf("chown %s: %v", path, err)
			}
		}
	}
	for k, v := range opts.Config {
		p.config = append(p.config, fmt.Sprintf(" -c '%s=%s'", k, v))
	}
	sort.Strings(p.config)
	p.Start(tb)
	return p
}

// URL is the connection URL of the cluster's postgres database; it stays the same across Stop and Start.
func (p *Postgres) URL() string {
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable", p.port)
}

// Addr is the server's host:port.
func (p *Postgres) Addr() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(p.port)) }

func (p *Postgres) dataDir() string { return filepath.Join(p.dir, "data") }

// Start starts the server (again) and waits until it accepts connections.
func (p *Postgres) Start(tb testing.TB) {
	tb.Helper()
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.running {
		tb.Fatalf("postgres on %s is already running", p.Addr())
	}
	opts := fmt.Sprintf("-p %d -k %s -c listen_addresses=127.0.0.1 -c max_connections=200", p.port, p.dir) +
		strings.Join(p.config, "")
	if err := p.pgctl("start", "-w", "-t", "60", "-l", filepath.Join(p.dir, "server.log"), "-o", opts); err != nil {
		tb.Fatalf("start postgres on %s: %v; log: %s", p.Addr(), err, tail(filepath.Join(p.dir, "server.log")))
	}
	p.running = true
}

// Stop shuts the server down (fast mode: sessions are disconnected, nothing acknowledged is lost) and
// waits until it is gone.
func (p *Postgres) Stop(tb testing.TB) { tb.Helper(); p.stop(tb, "fast") }

// Crash stops the server like a power cut (immediate mode): it recovers from its WAL at the next Start.
func (p *Postgres) Crash(tb testing.TB) { tb.Helper(); p.stop(tb, "immediate") }

func (p *Postgres) stop(tb testing.TB, mode string) {
	tb.Helper()
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.running {
		tb.Fatalf("postgres on %s is not running", p.Addr())
	}
	if err := p.pgctl("stop", "-m", mode, "-w", "-t", "60"); err != nil {
		tb.Fatalf("stop postgres on %s: %v", p.Addr(), err)
	}
	p.running = false
}

// Open connects to the cluster with the given extra connection parameters (nil for none) and closes the
// pool when the test ends. The server must be running.
func (p *Postgres) Open(tb testing.TB, params map[string]any) *bun.DB {
	tb.Helper()
	return OpenURL(tb, p.URL(), params)
}

// Schema returns a pool on the cluster's postgres database with bunbox's schema applied (the cluster is
// the test's own, so no separate schema is needed).
func (p *Postgres) Schema(tb testing.TB) *bun.DB {
	tb.Helper()
	db := p.Open(tb, nil)
	if err := migrateUp(context.Background(), db, model.Location{}); err != nil {
		tb.Fatalf("migrate %s: %v", p.URL(), err)
	}
	return db
}

func (p *Postgres) pgctl(args ...string) error {
	args = append([]string{"-D", p.dataDir()}, args...)
	out, err := p.command(filepath.Join(p.bin, "pg_ctl"), args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("pg_ctl %s: %w: %s", args[2], err, out)
	}
	return nil
}

// command runs as the cluster's owner, in the cluster's directory (the postgres user may not be allowed
// into the test's working directory).
func (p *Postgres) command(name string, args ...string) *exec.Cmd {
	cmd := exec.Command(name, args...)
	cmd.Dir = p.dir
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Credential: p.cred}
	return cmd
}

// pgBin finds the directory of the newest installed PostgreSQL server binaries.
func pgBin() (string, error) {
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	sort.Slice(dirs, func(i, j int) bool { return pgMajor(dirs[i]) > pgMajor(dirs[j]) })
	for _, d := range dirs {
		if _, err := os.Stat(filepath.Join(d, "pg_ctl")); err == nil {
			return d, nil
		}
	}
	if path, err := exec.LookPath("pg_ctl"); err == nil {
		return filepath.Dir(path), nil
	}
	return "", fmt.Errorf("PostgreSQL server binaries not found (expected /usr/lib/postgresql/*/bin/pg_ctl)")
}

func pgMajor(binDir string) int {
	n, _ := strconv.Atoi(filepath.Base(filepath.Dir(binDir)))
	return n
}

// freePort returns a loopback TCP port that was free a moment ago.
func freePort(tb testing.TB) int {
	tb.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatalf("free port: %v", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

func tail(path string) string {
	b, _ := os.ReadFile(path)
	if len(b) > 2000 {
		b = b[len(b)-2000:]
	}
	return string(b)
}
