package readmetest

import (
	"bufio"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"unicode"

	"github.com/stretchr/testify/require"
)

// pendingPages are pages the README links that another branch writes; a link to one of them may dangle
// until that branch is merged. Delete an entry once its page is on main.
var pendingPages = map[string]string{}

// mdLink is an inline Markdown link or image: [text](target) or ![alt](target).
var mdLink = regexp.MustCompile(`!?\[[^\]]*\]\(([^)\s]+)\)`)

// link is one relative link of a file of docFiles.
type link struct {
	file   string // the file that holds it
	line   int
	target string // the file it points to, relative to the module's root ("" for the file itself)
	anchor string // the part after #, if any
}

// relativeLinks reads the relative links of file's text, outside code blocks and code spans.
func relativeLinks(file, text string) []link {
	var links []link
	inFence := false
	for i, l := range strings.Split(text, "\n") {
		if strings.HasPrefix(strings.TrimSpace(l), "```") {
			inFence = !inFence
			continue
		}
		if inFence {
			continue
		}
		for _, m := range mdLink.FindAllStringSubmatch(withoutCodeSpans(l), -1) {
			target := m[1]
			if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			target, anchor, _ := strings.Cut(target, "#")
			if target != "" {
				target = path.Clean(path.Join(path.Dir(file), target))
			}
			links = append(links, link{file: file, line: i + 1, target: target, anchor: anchor})
		}
	}
	return links
}

// withoutCodeSpans blanks out `code spans`, where brackets are code, not links.
func withoutCodeSpans(l string) string {
	parts := strings.Split(l, "`")
	for i := 1; i < len(parts); i += 2 {
		parts[i] = strings.Repeat(" ", len(parts[i]))
	}
	return strings.Join(parts, "`")
}

// anchors is the set of heading anchors GitHub makes for a Markdown text: a heading lowercased, its
// letters, digits, hyphens and underscores kept, spaces made hyphens, everything else dropped; a
// repeated anchor gets -1, -2, ...
func anchors(text string) map[string]bool {
	seen := map[string]bool{}
	inFence := false
	for _, l := range strings.Split(text, "\n") {
		if strings.HasPrefix(strings.TrimSpace(l), "```") {
			inFence = !inFence
			continue
		}
		if inFence || !strings.HasPrefix(l, "#") {
			continue
		}
		heading := strings.TrimSpace(strings.TrimLeft(l, "#"))
		var b strings.Builder
		for _, r := range strings.ToLower(heading) {
			switch {
			case unicode.IsLetter(r) || unicode.IsDigit(r) || r == '-' || r == '_':
				b.WriteRune(r)
			case r == ' ':
				b.WriteRune('-')
			}
		}
		a := b.String()
		for n := 1; seen[a]; n++ {
			a = fmt.Sprintf("%s-%d", b.String(), n)
		}
		seen[a] = true
	}
	return seen
}

func TestAnchors(t *testing.T) {
	t.Parallel()
	got := anchors("# bunbox\n## Quick start: three steps\n```sh\n# not a heading\n```\n## `bunbox dead` and TLS\n## Quick start: three steps\n")
	require.Equal(t, map[string]bool{"bunbox": true, "quick-start-three-steps": true, "bunbox-dead-and-tls": true, "quick-start-three-steps-1": true}, got)
}

// Every relative link of README.md and of the pages of docs/ reaches a file that exists, and a link to a
// heading of a Markdown file (page.md#heading, or #heading within the page) reaches a heading it has.
func TestDocsLinksResolve(t *testing.T) {
	t.Parallel()
	root := moduleRoot(t)
	n := 0
	for _, f := range docFiles(t) {
		for _, l := range relativeLinks(f, readFile(t, f)) {
			n++
			target := l.target
			if target == "" {
				target = l.file
			}
			if _, err := os.Stat(filepath.Join(root, filepath.FromSlash(target))); err != nil {
				if why, ok := pendingPages[target]; ok {
					t.Logf("%s:%d: %s does not exist yet: %s", l.file, l.line, target, why)
					continue
				}
				t.Errorf("%s:%d: the link to %s reaches no file", l.file, l.line, target)
				continue
			}
			if l.anchor != "" && strings.HasSuffix(target, ".md") && !anchors(readFile(t, target))[l.anchor] {
				t.Errorf("%s:%d: %s has no heading for #%s", l.file, l.line, target, l.anchor)
			}
		}
	}
	require.NotZero(t, n, "the docs hold relative links")
}

// The README links every page of docs/, so that each is reachable from the front page.
func TestReadmeLinksEveryDocsPage(t *testing.T) {
	t.Parallel()
	linked := map[string]bool{}
	for _, l := range relativeLinks("README.md", readFile(t, "README.md")) {
		linked[l.target] = true
	}
	for _, f := range docFiles(t)[1:] {
		require.True(t, linked[f], "README.md links %s", f)
	}
	for page := range pendingPages {
		require.True(t, linked[page], "README.md links %s", page)
	}
}

// The README stays a front page: at most 300 lines.
func TestReadmeIsShort(t *testing.T) {
	t.Parallel()
	n := strings.Count(readFile(t, "README.md"), "\n")
	require.LessOrEqual(t, n, 300, "README.md has %d lines; move the detail into a page of docs/", n)
}

// makeTargets reads the targets of the Makefile: the names before the colon of its rule lines.
func makeTargets(t *testing.T) map[string]bool {
	t.Helper()
	f, err := os.Open(filepath.Join(moduleRoot(t), "Makefile"))
	require.NoError(t, err)
	defer f.Close()
	rule := regexp.MustCompile(`^([a-zA-Z/_ -]+):([^=]|$)`)
	targets := map[string]bool{}
	s := bufio.NewScanner(f)
	for s.Scan() {
		if m := rule.FindStringSubmatch(s.Text()); m != nil {
			for _, name := range strings.Fields(m[1]) {
				targets[name] = true
			}
		}
	}
	require.NoError(t, s.Err())
	require.True(t, targets["test"] && targets["demo"], "the Makefile's targets are read: %v", targets)
	return targets
}

// Every `make TARGET` the docs name (in a code span, or at the start of a line of a shell block) is a target of the Makefile, and every folder the README's "What is
// in the box" names exists.
func TestDocsNameWhatExists(t *testing.T) {
	t.Parallel()
	targets := makeTargets(t)
	makeCmd := regexp.MustCompile("(?:`|^)make ([a-z][a-z/_-]*)") // in a code span, or a line of a shell block
	for _, f := range docFiles(t) {
		for i, l := range strings.Split(readFile(t, f), "\n") {
			for _, m := range makeCmd.FindAllStringSubmatch(l, -1) {
				if !targets[m[1]] {
					t.Errorf("%s:%d: make %s is no target of the Makefile", f, i+1, m[1])
				}
			}
		}
	}

	readme := readFile(t, "README.md")
	_, box, ok := strings.Cut(readme, "\n## What is in the box")
	require.True(t, ok, "README.md has a \"## What is in the box\" section")
	box, _, _ = strings.Cut(box, "\n## ")
	folder := regexp.MustCompile("^\\| `([a-z][a-z0-9_/.-]*/)`")
	n := 0
	for _, l := range strings.Split(box, "\n") {
		if m := folder.FindStringSubmatch(l); m != nil {
			n++
			fi, err := os.Stat(filepath.Join(moduleRoot(t), filepath.FromSlash(m[1])))
			if err != nil || !fi.IsDir() {
				t.Errorf("README.md names the folder %s, which does not exist", m[1])
			}
		}
	}
	require.NotZero(t, n, "the box's table names folders as `name/`")
}
