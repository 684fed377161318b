package docs

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestCommands runs, as written, every command a user types on the pages of
// commandPages, so that a renamed flag, a moved file or a changed output
// breaks the build before it breaks a reader. Each page is a scenario of
// its own, run in page order from the repository's root, like a user
// following it in a fresh clone.
//
// # Markers
//
// A command block is a ```sh fence directly preceded by a marker line, an
// HTML comment (invisible once rendered):
//
//	<!-- test -->                        or <!-- test: run ... -->
//	<!-- test: start ready=RE ... -->
//	<!-- test: skip WHY -->
//
// run: the block runs as one `sh -e` script (every line a command typed
// in one shell, in order) and must exit 0 within runTimeout. Attributes:
// want=RE, its output (stdout and stderr) must match RE; of=ID want=RE,
// instead, the output that the running start block ID writes from this
// block's start on must come to match RE within ofTimeout (a change
// reaching a running client).
//
// start: the block runs in the background, as in a terminal of its own
// (`make run`, `go run ./deploy/local up`, a client), and the page goes on
// once its output matches ready=RE, within readyTimeout. It runs until the
// page's end, when it is killed; one that exits on its own before then
// must exit 0. id=ID names it for of=.
//
// skip: the block is not run; WHY says why (a command that cannot run
// inside a test, such as `make test`).
//
// run and start: needs=CMD runs the block only where CMD is on PATH
// (envoy); elsewhere the test logs that it left the block out, and a run
// block watching it with of= too. Values are bare words or are
// quoted with ' or " (no escapes). RE is Go regexp syntax matched anywhere
// in the output, with `.` matching newlines too.
//
// On a page marked every in commandPages, every ```sh fence must carry a
// marker, so a new command block cannot go untested by accident.
//
// # Isolation
//
// The commands run with the literal default addresses and paths (ports
// 18000, 18001, 2379, 9901, 127.0.10.x, ./legation-data, bin/) in a
// sandbox: unshare(1) makes a network namespace with only loopback, so
// nothing they listen on meets the host's ports or other tests, a PID
// namespace whose init is the test's holder process, so that every process
// they leave dies with it, even if the test binary is killed, and a mount
// namespace in which an overlay lies over the repository at its own path,
// so that what they write (bin/, legation-data/) lands in a scratch
// directory, never in the repository, while the Go build cache still hits.
// bin/ and legation-data/ left in the checkout are hidden, as in a fresh
// clone. TMPDIR is a fresh directory (pages write ${TMPDIR:-/tmp}), and
// LEGATION_* and make's variables are left out of the environment. It
// needs root (as `make test` runs), unshare and nsenter (util-linux) and
// ip (iproute2).
func TestCommands(t *testing.T) {
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	for _, page := range commandPages {
		// Named by the file alone: a slash would split -run patterns.
		t.Run(filepath.Base(page.path), func(t *testing.T) {
			t.Parallel()
			blocks, err := parseCommandBlocks(page.path, page.every)
			if err != nil {
				t.Fatal(err)
			}
			newSandbox(t, root).runPage(t, page.path, blocks)
		})
	}
}

// commandPages are the pages whose command blocks TestCommands runs, as
// paths from docs/. every: each ```sh fence of the page must be marked.
var commandPages = []struct {
	path  string
	every bool
}{
	{"../README.md", true},
	{"getting-started/quick-start.md", true},
	{"getting-started/demo.md", true},
	{"getting-started/local-cluster.md", true},
}

// cmdBlock is one marked ```sh block of a page.
type cmdBlock struct {
	line   int    // the marker's, from 1
	action string // run, start or skip
	script string // the fence's lines
	id     string // start: the name of= uses
	ready  string // start: the output that says it is up
	want   string // run: what its output, or that of block of, must match
	of     string // run: a start block's id
	needs  string // a command that must be on PATH, else the block is left out
}

// where names the block in messages: page:line.
func (b cmdBlock) where(page string) string { return fmt.Sprintf("%s:%d", page, b.line) }

// markerRE is a marker line; its group is what follows "test:".
var markerRE = regexp.MustCompile(`^<!--\s*test(?::\s*(.*?))?\s*-->$`)

// parseCommandBlocks returns the marked blocks of the page at path, in
// order. It fails on a malformed marker, a marker not followed by a ```sh
// fence, an unknown attribute, an of= naming no earlier start block, a
// page without marked blocks, and, with every, an unmarked ```sh fence.
func parseCommandBlocks(path string, every bool) ([]cmdBlock, error) {
	p, err := readFences(path)
	if err != nil {
		return nil, err
	}
	if err := checkMarkerLines(path, p); err != nil {
		return nil, err
	}
	var blocks []cmdBlock
	ids := map[string]bool{}
	for _, f := range p.fences {
		if !markerRE.MatchString(f.before) {
			if f.info == "sh" && every {
				return nil, fmt.Errorf("%s:%d: a ```sh block without a <!-- test: ... --> marker", path, f.line)
			}
			continue
		}
		b, err := parseMarker(markerRE.FindStringSubmatch(f.before)[1], f.line-1, ids)
		if err != nil {
			return nil, fmt.Errorf("%s:%d: %w", path, f.line-1, err)
		}
		if f.info != "sh" {
			return nil, fmt.Errorf("%s:%d: a test marker must precede a ```sh fence, not %q", path, f.line-1, "```"+f.info)
		}
		b.script = f.body
		blocks = append(blocks, b)
	}
	if len(blocks) == 0 {
		return nil, fmt.Errorf("%s: no <!-- test --> block", path)
	}
	return blocks, nil
}

// checkMarkerLines checks the marker lines outside the page's fences:
// each is well formed and directly above a fence.
func checkMarkerLines(path string, p *fenced) error {
	for i, line := range p.lines {
		n := i + 1
		if p.inside[n] || !strings.HasPrefix(line, "<!-- test") {
			continue
		}
		if !markerRE.MatchString(line) {
			return fmt.Errorf("%s:%d: malformed test marker %q", path, n, line)
		}
		if !p.inside[n+1] {
			return fmt.Errorf("%s:%d: a test marker must precede a ```sh fence", path, n)
		}
	}
	return nil
}

// parseMarker parses what follows "test:" in the marker at line; ids holds
// the ids of the start blocks before it, and gets this one's.
func parseMarker(s string, line int, ids map[string]bool) (cmdBlock, error) {
	b := cmdBlock{line: line, action: "run"}
	action, rest, _ := strings.Cut(s, " ")
	if action != "" {
		b.action = action
	}
	if b.action == "skip" {
		if strings.TrimSpace(rest) == "" {
			return b, errors.New("skip: say why")
		}
		return b, nil
	}
	if b.action != "run" && b.action != "start" {
		return b, fmt.Errorf("unknown action %q (run, start or skip)", b.action)
	}
	attrs, err := markerAttrs(rest)
	if err != nil {
		return b, err
	}
	for k, v := range attrs {
		switch {
		case k == "needs":
			b.needs = v
		case k == "want" && b.action == "run":
			b.want = v
		case k == "of" && b.action == "run":
			b.of = v
		case k == "id" && b.action == "start":
			b.id = v
		case k == "ready" && b.action == "start":
			b.ready = v
		default:
			return b, fmt.Errorf("%s takes no attribute %q", b.action, k)
		}
	}
	for _, re := range []string{b.want, b.ready} {
		if _, err := regexp.Compile("(?s)" + re); err != nil {
			return b, err
		}
	}
	switch {
	case b.action == "start" && b.ready == "":
		return b, errors.New("start needs ready=RE")
	case b.of != "" && b.want == "":
		return b, errors.New("of= needs want=RE")
	case b.of != "" && !ids[b.of]:
		return b, fmt.Errorf("of=%s names no start block above", b.of)
	case b.id != "" && ids[b.id]:
		return b, fmt.Errorf("id=%s is taken", b.id)
	}
	if b.id != "" {
		ids[b.id] = true
	}
	return b, nil
}

// markerAttrs parses key=value pairs separated by spaces; a value is a
// bare word or is quoted with ' or ".
func markerAttrs(s string) (map[string]string, error) {
	attrs := map[string]string{}
	for s = strings.TrimSpace(s); s != ""; s = strings.TrimSpace(s) {
		key, rest, ok := strings.Cut(s, "=")
		if !ok || key == "" || strings.ContainsAny(key, " \t") {
			return nil, fmt.Errorf("want key=value, got %q", s)
		}
		var val string
		if q := rest[:min(1, len(rest))]; q == `"` || q == "'" {
			end := strings.Index(rest[1:], q)
			if end < 0 {
				return nil, fmt.Errorf("%s: unclosed %s", key, q)
			}
			val, s = rest[1:1+end], rest[2+end:]
		} else {
			val, s, _ = strings.Cut(rest, " ")
		}
		if _, dup := attrs[key]; dup {
			return nil, fmt.Errorf("%s given twice", key)
		}
		attrs[key] = val
	}
	return attrs, nil
}

// TestCommandMarkers checks the marker parser on pages made for it.
func TestCommandMarkers(t *testing.T) {
	const fence = "```"
	tests := []struct {
		name, page string
		every      bool
		wantErr    string // empty: parses
	}{
		{"run and start", "<!-- test: start id=a ready='x y' -->\n" + fence + "sh\nmake run\n" + fence + "\n<!-- test: run of=a want=\"b\" -->\n" + fence + "sh\nls\n" + fence + "\n", true, ""},
		{"bare marker", "<!-- test -->\n" + fence + "sh\nls\n" + fence + "\n", true, ""},
		{"unmarked, every", "<!-- test -->\n" + fence + "sh\nls\n" + fence + "\n" + fence + "sh\nls\n" + fence + "\n", true, "without a <!-- test"},
		{"unmarked, not every", "<!-- test -->\n" + fence + "sh\nls\n" + fence + "\n" + fence + "sh\nls\n" + fence + "\n", false, ""},
		{"not before a fence", "<!-- test -->\ntext\n", false, "must precede"},
		{"not sh", "<!-- test -->\n" + fence + "text\nls\n" + fence + "\n", false, "must precede a ```sh fence"},
		{"start without ready", "<!-- test: start id=a -->\n" + fence + "sh\nls\n" + fence + "\n", false, "needs ready"},
		{"unknown of", "<!-- test: run of=a want=b -->\n" + fence + "sh\nls\n" + fence + "\n", false, "names no start block"},
		{"unknown attribute", "<!-- test: run wants=b -->\n" + fence + "sh\nls\n" + fence + "\n", false, `no attribute "wants"`},
		{"skip without why", "<!-- test: skip -->\n" + fence + "sh\nls\n" + fence + "\n", false, "say why"},
		{"malformed", "<!-- test: run\n" + fence + "sh\nls\n" + fence + "\n", false, "malformed"},
		{"none", fence + "sh\nls\n" + fence + "\n", false, "no <!-- test --> block"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "page.md")
			if err := os.WriteFile(path, []byte(tt.page), 0o644); err != nil {
				t.Fatal(err)
			}
			_, err := parseCommandBlocks(path, tt.every)
			switch {
			case tt.wantErr == "" && err != nil:
				t.Errorf("got %v, want no error", err)
			case tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)):
				t.Errorf("got %v, want an error with %q", err, tt.wantErr)
			}
		})
	}
}
