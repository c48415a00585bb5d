package main

import (
	"debug/elf"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// The image of `bunbox relay` and its build context's ignore file.
var (
	repoRoot         = filepath.Join("..", "..")
	dockerfile       = filepath.Join(repoRoot, "deploy", "Dockerfile")
	dockerignoreFile = filepath.Join(repoRoot, "deploy", "Dockerfile.dockerignore")
)

// nonrootUID is the user the image, the Deployment and the unit's tests expect: distroless's nonroot.
const nonrootUID = 65532

// instruction is one Dockerfile instruction: its keyword, upper case, and its arguments.
type instruction struct {
	cmd  string
	args string
}

// stage is one FROM of a Dockerfile and the instructions under it.
type stage struct {
	image, name string
	body        []instruction
}

// parseDockerfile reads the instructions of a Dockerfile (comments dropped, continued lines joined) and
// splits them into the ARGs before the first FROM and the stages, with ${ARG} defaults substituted in FROM.
func parseDockerfile(t *testing.T, text string) (args map[string]string, stages []stage) {
	t.Helper()
	args = map[string]string{}
	var line strings.Builder
	var insts []instruction
	for _, l := range strings.Split(text, "\n") {
		l = strings.TrimSpace(l)
		if strings.HasPrefix(l, "#") || l == "" && line.Len() == 0 {
			continue
		}
		if cont, ok := strings.CutSuffix(l, "\\"); ok {
			line.WriteString(cont + " ")
			continue
		}
		line.WriteString(l)
		cmd, rest, _ := strings.Cut(strings.TrimSpace(line.String()), " ")
		insts = append(insts, instruction{strings.ToUpper(cmd), strings.TrimSpace(rest)})
		line.Reset()
	}
	require.Zero(t, line.Len(), "the Dockerfile ends in a continued line")
	for _, in := range insts {
		switch {
		case in.cmd == "ARG" && stages == nil:
			k, v, _ := strings.Cut(in.args, "=")
			args[k] = v
		case in.cmd == "FROM":
			f := strings.Fields(os.Expand(in.args, func(k string) string { return args[k] }))
			st := stage{image: f[0]}
			if len(f) == 3 && strings.EqualFold(f[1], "AS") {
				st.name = f[2]
			} else {
				require.Len(t, f, 1, "FROM %s", in.args)
			}
			stages = append(stages, st)
		default:
			require.NotEmpty(t, stages, "%s before the first FROM", in.cmd)
			stages[len(stages)-1].body = append(stages[len(stages)-1].body, in)
		}
	}
	return args, stages
}

// find returns the arguments of every instruction cmd of st.
func (st stage) find(cmd string) []string {
	var out []string
	for _, in := range st.body {
		if in.cmd == cmd {
			out = append(out, in.args)
		}
	}
	return out
}

// execForm parses a JSON-array (exec form) argument list such as ["relay", "-metrics-addr", ":9464"].
func execForm(t *testing.T, s string) []string {
	t.Helper()
	require.True(t, strings.HasPrefix(s, "[") && strings.HasSuffix(s, "]"), "%q is not in exec form", s)
	var out []string
	for _, f := range strings.Split(strings.Trim(s, "[]"), ",") {
		v, err := strconv.Unquote(strings.TrimSpace(f))
		require.NoError(t, err, "%q", s)
		out = append(out, v)
	}
	return out
}

// shellWords splits a shell command line into words, with double and single quotes (no escapes, no
// expansions: enough for the Dockerfile's build command).
func shellWords(s string) []string {
	var words []string
	var w strings.Builder
	var quote rune
	inWord := false
	for _, r := range s {
		switch {
		case quote != 0 && r == quote:
			quote = 0
		case quote != 0:
			w.WriteRune(r)
		case r == '"' || r == '\'':
			quote, inWord = r, true
		case r == ' ' || r == '\t':
			if inWord {
				words = append(words, w.String())
				w.Reset()
				inWord = false
			}
		default:
			w.WriteRune(r)
			inWord = true
		}
	}
	if inWord {
		words = append(words, w.String())
	}
	return words
}

// goDirective returns go.mod's go version, e.g. "1.26".
func goDirective(t *testing.T) string {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(repoRoot, "go.mod"))
	require.NoError(t, err)
	m := regexp.MustCompile(`(?m)^go (\d+\.\d+)`).FindStringSubmatch(string(raw))
	require.NotNil(t, m, "go.mod has a go directive")
	return m[1]
}

// versionAtLeast reports whether the dotted version v is at least min (numerically, part by part).
func versionAtLeast(t *testing.T, v, min string) bool {
	t.Helper()
	a, b := strings.Split(v, "."), strings.Split(min, ".")
	for i := range b {
		if i >= len(a) {
			return false
		}
		x, err := strconv.Atoi(a[i])
		require.NoError(t, err, "version %q", v)
		y, err := strconv.Atoi(b[i])
		require.NoError(t, err, "version %q", min)
		if x != y {
			return x > y
		}
	}
	return true
}

// requireAllInterfaces fails unless args hold -metrics-addr with a host that every interface reaches (a
// probe comes from outside the container) and port port.
func requireAllInterfaces(t *testing.T, args []string, port string) {
	t.Helper()
	i := strings.Index(strings.Join(args, " "), "-metrics-addr ")
	require.GreaterOrEqual(t, i, 0, "%q sets -metrics-addr", args)
	addr := strings.Fields(strings.Join(args, " ")[i:])[1]
	host, p, ok := strings.Cut(addr, ":")
	require.True(t, ok, "-metrics-addr %q", addr)
	require.Contains(t, []string{"", "0.0.0.0", "[::]"}, host, "-metrics-addr %q must listen on every interface: the probes come from outside", addr)
	require.Equal(t, port, p, "-metrics-addr %q serves the probes on the declared port", addr)
}

// requireFlagsParse runs `bunbox <args> -h` in this process: it exits 0 only when every flag of args is
// one the command has.
func requireFlagsParse(t *testing.T, args []string) {
	t.Helper()
	code, stdout, stderr := runCLI(t, map[string]string{}, append(append([]string{}, args...), "-h")...)
	require.Equal(t, 0, code, "bunbox %q: stdout %s\nstderr %s", args, stdout, stderr)
}

// secretName matches the name of a variable or argument that would carry a secret.
var secretName = regexp.MustCompile(`(?i)password|passwd|secret|token|_url\b|api_?key|private`)

// buildCommand is the Dockerfile's `go build` command: its environment assignments and its arguments.
func buildCommand(t *testing.T, st stage) (env, args []string) {
	t.Helper()
	for _, run := range st.find("RUN") {
		words := shellWords(run)
		for i, w := range words {
			if w == "go" && i+1 < len(words) && words[i+1] == "build" {
				return words[:i], words[i+1:]
			}
		}
	}
	t.Fatalf("the build stage has no RUN go build")
	return nil, nil
}

// TestDockerfile lints deploy/Dockerfile (no Docker engine runs here): a golang build stage at least
// go.mod's version whose `go build` is CGO_ENABLED=0 of ./cmd/bunbox, and a distroless runtime stage that
// copies only the binary, runs as a non-root user, carries no secret, and runs `bunbox relay` with its
// probes on the port it exposes. It then builds the binary with the Dockerfile's own command, checks that
// it is static (it runs on distroless/static), and runs the image's command line with -h.
func TestDockerfile(t *testing.T) {
	t.Parallel()
	raw, err := os.ReadFile(dockerfile)
	require.NoError(t, err)
	args, stages := parseDockerfile(t, string(raw))
	require.GreaterOrEqual(t, len(stages), 2, "multi-stage: a build stage and a runtime stage")
	build, final := stages[0], stages[len(stages)-1]

	// The build stage: Go at least go.mod's version, the module's CLI built without cgo.
	image, tag, _ := strings.Cut(build.image, ":")
	require.Equal(t, "golang", image, "the build stage is the official Go image")
	require.True(t, versionAtLeast(t, strings.SplitN(tag, "-", 2)[0], goDirective(t)),
		"golang:%s builds a module whose go.mod says go %s", tag, goDirective(t))
	require.NotEmpty(t, build.name, "the build stage is named, for COPY --from")
	env, goArgs := buildCommand(t, build)
	require.Contains(t, env, "CGO_ENABLED=0", "a static binary, for distroless/static")
	require.Equal(t, "./cmd/bunbox", goArgs[len(goArgs)-1], "it builds the CLI's package")
	out := ""
	for i, a := range goArgs {
		if a == "-o" {
			out = goArgs[i+1]
		}
	}
	require.NotEmpty(t, out, "go build -o names the binary")

	// The runtime stage: distroless, the binary alone, a non-root user, bunbox relay.
	require.Regexp(t, `^gcr\.io/distroless/static(-debian\d+)?:nonroot$`, final.image)
	copies := final.find("COPY")
	require.Len(t, copies, 1, "the runtime stage copies the binary and nothing else")
	f := strings.Fields(copies[0])
	require.Equal(t, []string{"--from=" + build.name, out}, f[:2], "it copies the build stage's binary")
	bin := f[2]
	users := final.find("USER")
	require.NotEmpty(t, users, "the runtime stage sets USER")
	user := users[len(users)-1]
	require.Equal(t, strconv.Itoa(nonrootUID)+":"+strconv.Itoa(nonrootUID), user,
		"a numeric non-root user, so that Kubernetes' runAsNonRoot can check it")
	require.Equal(t, []string{bin}, execForm(t, final.find("ENTRYPOINT")[0]))
	cmd := execForm(t, final.find("CMD")[0])
	require.Equal(t, "relay", cmd[0])
	exposed := final.find("EXPOSE")
	require.Len(t, exposed, 1)
	requireAllInterfaces(t, cmd, exposed[0])

	// No secret in the image: no variable, argument or label that would hold one, no credentials in a URL.
	for k := range args {
		require.NotRegexp(t, secretName, k, "ARG %s", k)
	}
	for _, st := range stages {
		for _, in := range st.body {
			if in.cmd == "ENV" || in.cmd == "ARG" || in.cmd == "LABEL" {
				require.NotRegexp(t, secretName, in.args, "%s %s", in.cmd, in.args)
			}
			require.NotRegexp(t, `://[^/\s]*@`, in.args, "%s %s holds credentials", in.cmd, in.args)
		}
	}

	// The context keeps what the build needs.
	raw, err = os.ReadFile(dockerignoreFile)
	require.NoError(t, err)
	for _, p := range strings.Split(string(raw), "\n") {
		p = strings.TrimPrefix(strings.TrimSpace(p), "/")
		if p == "" || strings.HasPrefix(p, "#") {
			continue
		}
		for _, need := range []string{"go.mod", "go.sum", "cmd", "cmd/bunbox/main.go", "migrate/sql", "ui/assets", "relay/relay.go"} {
			ok, err := filepath.Match(p, need)
			require.NoError(t, err, "pattern %q", p)
			require.False(t, ok, "Dockerfile.dockerignore's %q leaves %s out of the build", p, need)
		}
	}

	// The binary, built with the Dockerfile's command.
	if testing.Short() {
		t.Skip("builds the binary; skipped with -short")
	}
	dst := filepath.Join(t.TempDir(), "bunbox")
	for i, a := range goArgs {
		if a == "-o" {
			goArgs[i+1] = dst
		}
	}
	c := exec.Command("go", goArgs...)
	c.Dir, c.Env = repoRoot, append(os.Environ(), env...)
	b, err := c.CombinedOutput()
	require.NoError(t, err, "%s %q:\n%s", env, goArgs, b)
	ef, err := elf.Open(dst)
	require.NoError(t, err)
	defer ef.Close()
	for _, p := range ef.Progs {
		require.NotEqual(t, elf.PT_INTERP, p.Type, "the binary is static: distroless/static has no libc")
	}
	b, err = exec.Command(dst, append(cmd, "-h")...).CombinedOutput()
	require.NoError(t, err, "bunbox %q -h:\n%s", cmd, b)
	require.Contains(t, string(b), "-metrics-addr")
}
