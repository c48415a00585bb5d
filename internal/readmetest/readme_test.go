package readmetest

import (
	"bytes"
	"errors"
	"fmt"
	"go/ast"
	"go/format"
	"go/importer"
	"go/parser"
	"go/token"
	"go/types"
	"io"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
)

// block is one ```go block of README.md or of a page of docs/.
type block struct {
	file       string // the file, relative to the module's root: README.md, docs/hooks.md
	line       int    // the file's line of the block's first line of code
	code       string // the code, fences left out
	fragment   bool   // marked <!-- fragment -->
	hidden     string // the Go declarations in the fragment marker
	hiddenLine int    // the file's line of the first of them
}

// complete reports whether the block is a program of its own: it has a package clause.
func (b block) complete() bool {
	for _, l := range strings.Split(b.code, "\n") {
		if l = strings.TrimSpace(l); l == "" || strings.HasPrefix(l, "//") {
			continue
		}
		return strings.HasPrefix(l, "package ")
	}
	return false
}

// moduleRoot is the directory of the module's go.mod, two levels up from this package.
func moduleRoot(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs(filepath.Join("..", ".."))
	require.NoError(t, err)
	_, err = os.Stat(filepath.Join(root, "go.mod"))
	require.NoError(t, err)
	return root
}

// docFiles is the documentation whose code is checked: README.md, then every page of docs/ (docs/*.md),
// as paths relative to the module's root.
func docFiles(t *testing.T) []string {
	t.Helper()
	pages, err := filepath.Glob(filepath.Join(moduleRoot(t), "docs", "*.md"))
	require.NoError(t, err)
	files := []string{"README.md"}
	for _, p := range slices.Sorted(slices.Values(pages)) {
		files = append(files, "docs/"+filepath.Base(p))
	}
	return files
}

// readFile reads a file of docFiles.
func readFile(t *testing.T, file string) string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(moduleRoot(t), filepath.FromSlash(file)))
	require.NoError(t, err)
	return string(data)
}

// docBlocks reads the ```go blocks of every file of docFiles with their markers.
func docBlocks(t *testing.T) []block {
	t.Helper()
	var blocks []block
	for _, f := range docFiles(t) {
		blocks = append(blocks, parseBlocks(t, f, readFile(t, f))...)
	}
	return blocks
}

// parseBlocks reads the ```go blocks of text, the content of file.
func parseBlocks(t *testing.T, file, text string) []block {
	t.Helper()
	lines := strings.Split(text, "\n")
	var blocks []block
	for i := 0; i < len(lines); i++ {
		fence := strings.TrimSpace(lines[i])
		if !strings.HasPrefix(fence, "```") {
			continue
		}
		lang := strings.TrimSpace(strings.TrimPrefix(fence, "```"))
		start := i + 1
		for i++; i < len(lines) && strings.TrimSpace(lines[i]) != "```"; i++ {
		}
		require.Less(t, i, len(lines), "%s:%d: the fence is never closed", file, start)
		if lang != "go" && !strings.HasPrefix(lang, "go ") {
			continue
		}
		b := block{file: file, line: start + 1, code: strings.Join(lines[start:i], "\n")}
		b.fragment, b.hidden, b.hiddenLine = marker(lines, start-1)
		blocks = append(blocks, b)
	}
	return blocks
}

// marker reads the HTML comment that ends on the line before the fence (index fence): whether it marks a
// fragment, the declarations after the word fragment, and the file's line of the first of them.
func marker(lines []string, fence int) (fragment bool, hidden string, hiddenLine int) {
	end := fence - 1
	if end < 0 || !strings.HasSuffix(strings.TrimSpace(lines[end]), "-->") {
		return false, "", 0
	}
	begin := end
	for begin >= 0 && !strings.HasPrefix(strings.TrimSpace(lines[begin]), "<!--") {
		begin--
	}
	if begin < 0 {
		return false, "", 0
	}
	first := strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(lines[begin]), "<!--"))
	if first != "fragment" && first != "fragment -->" {
		return false, "", 0
	}
	if begin == end {
		return true, "", 0
	}
	return true, strings.Join(lines[begin+1:end], "\n"), begin + 2
}

func TestParseBlocks(t *testing.T) {
	t.Parallel()
	readme := strings.Join([]string{
		"# x",                  // 1
		"```sh",                // 2
		"```go",                // 3: inside a sh block, not a go block
		"```",                  // 4
		"<!-- fragment -->",    // 5
		"```go",                // 6
		"a := 1",               // 7
		"```",                  // 8
		"<!-- fragment",        // 9
		"var in *worker.Inbox", // 10
		"-->",                  // 11
		"```go",                // 12
		"in.Handler()",         // 13
		"```",                  // 14
		"<!-- a comment -->",   // 15
		"```go",                // 16
		"package main",         // 17
		"```",                  // 18
	}, "\n")
	got := parseBlocks(t, "README.md", readme)
	require.Equal(t, []block{
		{file: "README.md", line: 7, code: "a := 1", fragment: true},
		{file: "README.md", line: 13, code: "in.Handler()", fragment: true, hidden: "var in *worker.Inbox", hiddenLine: 10},
		{file: "README.md", line: 17, code: "package main"},
	}, got)
	require.True(t, got[2].complete())
	require.False(t, got[0].complete())
}

// The packages a fragment may name without importing them, besides the module's own (found by go list):
// the name a fragment uses, and the import path.
var knownPackages = map[string]string{
	"context": "context", "errors": "errors", "fmt": "fmt", "os": "os", "time": "time", "log": "log",
	"slog": "log/slog", "http": "net/http", "json": "encoding/json", "signal": "os/signal", "sql": "database/sql",
	"asynq": "github.com/hibiken/asynq", "bun": "github.com/uptrace/bun", "uuid": "github.com/google/uuid",
	"pgx": "github.com/jackc/pgx/v5", "stdlib": "github.com/jackc/pgx/v5/stdlib",
	"pgdialect": "github.com/uptrace/bun/dialect/pgdialect", "pgdriver": "github.com/uptrace/bun/driver/pgdriver",
	"bunmigrate": "github.com/uptrace/bun/migrate", "bunboxmigrate": "github.com/bunbox/bunbox/migrate",
	"prometheus": "github.com/prometheus/client_golang/prometheus",
}

// givens declares what every fragment may use without declaring it.
const givens = `
var (
	ctx      context.Context
	db       *bun.DB
	ob       *bunx.Outbox
	redisOpt asynq.RedisConnOpt
	logger   *slog.Logger
)
`

// modulePackages adds the module's library packages (not commands, not internal ones) to names, by
// their package name: a package added or moved later is found too.
func modulePackages(t *testing.T, root string, names map[string]string) {
	t.Helper()
	out := goCmd(t, root, "list", "-f", "{{.Name}} {{.ImportPath}}", "./...")
	for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
		name, path, _ := strings.Cut(l, " ")
		if name == "main" || strings.Contains(path, "/internal/") || strings.Contains(path, "/example") || strings.Contains(path, "/bench") {
			continue
		}
		if name == "migrate" {
			name = "bunboxmigrate" // as the README and the package's doc import it
		}
		if _, ok := names[name]; !ok {
			names[name] = path
		}
	}
}

// goCmd runs the go command in dir and returns its standard output.
func goCmd(t *testing.T, dir string, args ...string) string {
	t.Helper()
	cmd := exec.Command("go", args...)
	cmd.Dir = dir
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	require.NoError(t, err, "go %s: %s", strings.Join(args, " "), stderr.String())
	return string(out)
}

// exportImporter imports packages from the compiler's export data, which `go list -export` builds into
// the build cache: the type checker sees what the compiler sees, without compiling anything itself.
type exportImporter struct {
	files map[string]string // import path -> export data file
	mu    sync.Mutex
	imp   types.Importer
}

func newExportImporter(t *testing.T, root string, fset *token.FileSet, paths []string) *exportImporter {
	t.Helper()
	out := goCmd(t, root, append([]string{"list", "-export", "-deps", "-f", "{{.ImportPath}}={{.Export}}"}, paths...)...)
	e := &exportImporter{files: map[string]string{}}
	for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
		if path, file, ok := strings.Cut(l, "="); ok && file != "" {
			e.files[path] = file
		}
	}
	e.imp = importer.ForCompiler(fset, "gc", func(path string) (io.ReadCloser, error) {
		file, ok := e.files[path]
		if !ok {
			return nil, fmt.Errorf("no export data for %q", path)
		}
		return os.Open(file)
	})
	return e
}

func (e *exportImporter) Import(path string) (*types.Package, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.imp.Import(path)
}

// source is a block as a Go file: a complete program as it stands, a fragment wrapped in a function with
// the givens and its hidden declarations. //line comments keep the file's line numbers.
func (b block) source(imports map[string]string) string {
	if b.complete() {
		return fmt.Sprintf("//line %s:%d:1\n%s\n", b.file, b.line, b.code)
	}
	var s strings.Builder
	s.WriteString("package readme\n\nimport (\n")
	names := make([]string, 0, len(imports))
	for name := range imports {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		fmt.Fprintf(&s, "\t%s %q\n", name, imports[name])
	}
	s.WriteString(")\n" + givens)
	if b.hidden != "" {
		fmt.Fprintf(&s, "\n//line %s:%d:1\n%s\n", b.file, b.hiddenLine, b.hidden)
	}
	fmt.Fprintf(&s, "\nfunc _() error {\n//line %s:%d:1\n%s\n\treturn nil\n}\n", b.file, b.line, b.code)
	return s.String()
}

// usedPackages is the packages of known that the fragment (with the givens and its hidden declarations)
// names in a selector, x.Y.
func (b block) usedPackages(t *testing.T, known map[string]string) map[string]string {
	t.Helper()
	src := "package readme\n" + givens + b.hidden + "\nfunc _() error {\n" + b.code + "\n}\n"
	f, err := parser.ParseFile(token.NewFileSet(), "", src, parser.SkipObjectResolution)
	if err != nil {
		return map[string]string{} // the type check reports it, at the file's line
	}
	used := map[string]string{}
	ast.Inspect(f, func(n ast.Node) bool {
		if sel, ok := n.(*ast.SelectorExpr); ok {
			if id, ok := sel.X.(*ast.Ident); ok {
				if path, ok := known[id.Name]; ok {
					used[id.Name] = path
				}
			}
		}
		return true
	})
	return used
}

// TestDocsGoBlocksCompile type-checks every ```go block of README.md and of the pages of docs/: a complete
// program strictly, a fragment (marked <!-- fragment -->) as a function body that may leave variables and
// imports unused.
func TestDocsGoBlocksCompile(t *testing.T) {
	t.Parallel()
	blocks := docBlocks(t)
	require.NotEmpty(t, blocks)
	for _, e := range typeCheck(t, moduleRoot(t), blocks) {
		t.Error(e)
	}
	files := map[string]int{}
	for _, b := range blocks {
		files[b.file]++
	}
	for _, f := range docFiles(t) {
		t.Logf("%s: %d Go blocks type-checked", f, files[f])
	}
}

// Every complete program of the docs is as gofmt prints it: a reader copies it into a file of their own.
func TestDocsProgramsAreGofmtClean(t *testing.T) {
	t.Parallel()
	for _, b := range docBlocks(t) {
		if !b.complete() {
			continue
		}
		formatted, err := format.Source([]byte(b.code))
		if err != nil {
			t.Errorf("%s:%d: the program does not parse: %v", b.file, b.line, err)
			continue
		}
		if got := strings.TrimSpace(string(formatted)); got != strings.TrimSpace(b.code) {
			t.Errorf("%s:%d: the program is not gofmt-clean; gofmt prints:\n%s", b.file, b.line, got)
		}
	}
}

// The checker finds what the issue found in the old quick start, and what a README block can get wrong.
func TestTypeCheckFindsErrors(t *testing.T) {
	t.Parallel()
	readme := strings.Join([]string{
		"<!-- fragment -->", // 1
		"```go",             // 2
		`db, err := connect.Postgres(ctx, os.Getenv("DATABASE_URL"), connect.Options{})`, // 3
		"err := bunboxmigrate.Up(ctx, db)",                                               // 4
		"unused := 1",                                                                    // 5: no error in a fragment
		"```",                                                                            // 6
		"```go",                                                                          // 7
		"r.Close()",                                                                      // 8
		"```",                                                                            // 9
		"```go",                                                                          // 10
		"package main",                                                                   // 11
		"func main() { x := 1 }",                                                         // 12
		"```",                                                                            // 13
		"<!-- fragment -->",                                                              // 14
		"```go",                                                                          // 15
		"in := worker.NewInbox(db, 42)",                                                  // 16
		"```",                                                                            // 17
	}, "\n")
	errs := typeCheck(t, moduleRoot(t), parseBlocks(t, "README.md", readme))
	require.Len(t, errs, 4, "%q", errs)
	require.Contains(t, errs, "README.md:4:5: no new variables on left side of :=")
	require.Contains(t, errs, "README.md:7: a ```go block that is no complete program (no package clause) needs <!-- fragment --> on the line before its fence")
	require.Contains(t, errs, "README.md:12:15: declared and not used: x")
	require.Contains(t, errs, "README.md:16:27: cannot use 42 (untyped int constant) as worker.Option value in argument to worker.NewInbox")
}

// typeCheck type-checks the blocks and returns their errors, each naming its file and line.
func typeCheck(t *testing.T, root string, blocks []block) []string {
	t.Helper()
	known := map[string]string{}
	for k, v := range knownPackages {
		known[k] = v
	}
	modulePackages(t, root, known)

	var errs []string
	fset := token.NewFileSet()
	type parsed struct {
		b    block
		file *ast.File
	}
	var files []parsed
	paths := map[string]bool{"context": true}
	for _, b := range blocks {
		if !b.complete() && !b.fragment {
			errs = append(errs, fmt.Sprintf("%s:%d: a ```go block that is no complete program (no package clause) needs <!-- fragment --> on the line before its fence", b.file, b.line-1))
			continue
		}
		var imports map[string]string
		if !b.complete() {
			imports = b.usedPackages(t, known)
			for _, name := range []string{"context", "bun", "bunx", "asynq", "slog"} { // the givens' types
				imports[name] = known[name]
			}
		}
		// The file's name has no directory: a relative //line name would be joined to it.
		name := fmt.Sprintf("%s.block%d.go", strings.ReplaceAll(b.file, "/", "_"), b.line)
		f, err := parser.ParseFile(fset, name, b.source(imports), parser.ParseComments)
		if err != nil {
			errs = append(errs, fmt.Sprintf("the block at %s:%d does not parse: %v", b.file, b.line, err))
			continue
		}
		for _, imp := range f.Imports {
			paths[strings.Trim(imp.Path.Value, `"`)] = true
		}
		files = append(files, parsed{b, f})
	}
	imp := newExportImporter(t, root, fset, slices.Sorted(maps.Keys(paths)))
	for _, p := range files {
		conf := types.Config{
			Importer: imp,
			Error: func(err error) {
				var te types.Error
				if p.b.fragment && errors.As(err, &te) && te.Soft &&
					(strings.HasPrefix(te.Msg, "declared and not used") || strings.HasSuffix(te.Msg, "imported and not used")) {
					return // a fragment shows a piece of a program: what it declares may be used further on
				}
				errs = append(errs, err.Error())
			},
		}
		_, _ = conf.Check(fmt.Sprintf("readme/%s/block%d", p.b.file, p.b.line), fset, []*ast.File{p.file}, nil)
	}
	return errs
}
