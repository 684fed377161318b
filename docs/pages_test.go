package docs

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// The shape of the docs: a short README for a new user, and docs/ by task.
const (
	readmeMaxLines = 250
	pageMaxLines   = 600
)

// sections are the folders of docs/, one per kind of task.
var sections = []string{"getting-started", "operations", "reference", "concepts", "development"}

// narration matches what the docs must not speak of: the work that made
// them rather than the product.
var narration = regexp.MustCompile(`(?i)session [0-9]+|issue [0-9]+|\brun [A-O]\b|\btoday\b`)

// testName matches a Go test, benchmark or fuzz function's name. Only the
// pages for contributors (development/) and the concepts' "tested by"
// lines name them.
var testName = regexp.MustCompile(`\b(Test|Benchmark|Fuzz)[A-Z][A-Za-z0-9_]*`)

// page is one Markdown file of the docs, by its path from the repository's
// root, with its lines and fences.
type page struct {
	path string
	*fenced
}

// pages reads README.md and every .md under docs/.
func pages(t *testing.T) []page {
	t.Helper()
	paths := []string{"README.md"}
	err := filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() && strings.HasSuffix(path, ".md") {
			paths = append(paths, filepath.Join("docs", path))
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	var out []page
	for _, p := range paths {
		f, err := readFences(filepath.Join("..", p))
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, page{p, f})
	}
	return out
}

// TestDocsShape: the README is short, docs/ has its five sections with
// pages in each, every page stays under pageMaxLines, and each begins
// with a sentence saying what it is for.
func TestDocsShape(t *testing.T) {
	all := pages(t)
	for _, s := range sections {
		n := 0
		for _, p := range all {
			if strings.HasPrefix(p.path, "docs/"+s+"/") {
				n++
			}
		}
		if n == 0 {
			t.Errorf("docs/%s/ has no page", s)
		}
	}
	for _, p := range all {
		limit := pageMaxLines
		if p.path == "README.md" {
			limit = readmeMaxLines
		}
		if len(p.lines) > limit {
			t.Errorf("%s: %d lines, more than %d", p.path, len(p.lines), limit)
		}
		if p.path != "README.md" {
			checkOpening(t, p)
		}
	}
}

// checkOpening checks that a page is a title followed by a paragraph of
// prose: the sentence saying what the page is for.
func checkOpening(t *testing.T, p page) {
	t.Helper()
	if len(p.lines) == 0 || !strings.HasPrefix(p.lines[0], "# ") {
		t.Errorf("%s:1: a page starts with its title (# ...)", p.path)
		return
	}
	for _, l := range p.lines[1:] {
		l = strings.TrimSpace(l)
		if l == "" {
			continue
		}
		if strings.HasPrefix(l, "#") || strings.HasPrefix(l, "|") || strings.HasPrefix(l, "```") ||
			strings.HasPrefix(l, "<!--") || strings.HasPrefix(l, "- ") || strings.HasPrefix(l, "* ") {
			t.Errorf("%s: the title is not followed by a sentence saying what the page is for (found %q)", p.path, l)
		}
		return
	}
	t.Errorf("%s: nothing under the title", p.path)
}

// TestDocsVoice: no page narrates the work that made it, and only the
// contributors' and concepts' pages name test functions.
func TestDocsVoice(t *testing.T) {
	for _, p := range pages(t) {
		mayNameTests := strings.HasPrefix(p.path, "docs/development/") || strings.HasPrefix(p.path, "docs/concepts/")
		for i, l := range p.lines {
			if m := narration.FindString(l); m != "" {
				t.Errorf("%s:%d: %q speaks of the work, not the product: %s", p.path, i+1, m, l)
			}
			if m := testName.FindString(l); m != "" && !mayNameTests {
				t.Errorf("%s:%d: names the test function %s (only docs/development/ and docs/concepts/ may)", p.path, i+1, m)
			}
		}
	}
}

// link matches a Markdown link's target.
var link = regexp.MustCompile(`\]\(([^)\s]+)\)`)

// TestDocsLinks: every relative link of the README and the docs leads to
// a file of the repository, and a link to a heading of a Markdown page
// leads to a heading that exists.
func TestDocsLinks(t *testing.T) {
	anchors := map[string][]string{}
	for _, p := range pages(t) {
		for i, l := range p.lines {
			if p.inside[i+1] {
				continue
			}
			for _, m := range link.FindAllStringSubmatch(l, -1) {
				checkLink(t, p.path, i+1, m[1], anchors)
			}
		}
	}
}

// checkLink checks one link target of page at line.
func checkLink(t *testing.T, page string, line int, target string, anchors map[string][]string) {
	t.Helper()
	if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
		return
	}
	file, anchor, _ := strings.Cut(target, "#")
	path := page
	if file != "" {
		path = filepath.Join(filepath.Dir(page), file)
	}
	if _, err := os.Stat(filepath.Join("..", path)); err != nil {
		t.Errorf("%s:%d: the link %q leads nowhere (%s does not exist)", page, line, target, path)
		return
	}
	if anchor == "" || !strings.HasSuffix(path, ".md") {
		return
	}
	if _, ok := anchors[path]; !ok {
		anchors[path] = headingAnchors(t, path)
	}
	if !slices.Contains(anchors[path], anchor) {
		t.Errorf("%s:%d: the link %q: %s has no heading with the anchor #%s", page, line, target, path, anchor)
	}
}

// headingAnchors lists the anchors GitHub gives the headings of a page:
// lower case, punctuation dropped but for hyphens and underscores, spaces
// as hyphens, and -1, -2 after a repeated one.
func headingAnchors(t *testing.T, path string) []string {
	t.Helper()
	p, err := readFences(filepath.Join("..", path))
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	seen := map[string]int{}
	for i, l := range p.lines {
		if p.inside[i+1] || !strings.HasPrefix(l, "#") {
			continue
		}
		a := slug(strings.TrimLeft(l, "# "))
		if n := seen[a]; n > 0 {
			out = append(out, a+"-"+strconv.Itoa(n))
		} else {
			out = append(out, a)
		}
		seen[a]++
	}
	return out
}

// slug is GitHub's anchor of a heading's text.
func slug(heading string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(heading) {
		switch {
		case r == ' ':
			b.WriteRune('-')
		case r == '-' || r == '_' || r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r > 127:
			b.WriteRune(r)
		}
	}
	return b.String()
}

func TestSlug(t *testing.T) {
	for in, want := range map[string]string{
		"Quick start":                           "quick-start",
		"etcd upkeep: compaction, defrag":       "etcd-upkeep-compaction-defrag",
		"gRPC services on `--xds-addr`":         "grpc-services-on---xds-addr",
		"Reconnects: initial_resource_versions": "reconnects-initial_resource_versions",
		"/debug/streams":                        "debugstreams",
	} {
		if got := slug(in); got != want {
			t.Errorf("slug(%q) = %q, want %q", in, got, want)
		}
	}
}
