package docs

import (
	"fmt"
	"os"
	"strings"
)

// A fence is one fenced code block of a Markdown page.
type fence struct {
	info   string // what follows the opening ```: sh, text, yaml, ...
	line   int    // the opening fence's line, from 1
	body   string // the lines between the two fences
	before string // the line before the opening fence ("" for the first)
}

// A page's fences, and which of its lines lie inside one (fence lines
// included), by line number from 1.
type fenced struct {
	lines  []string
	fences []fence
	inside map[int]bool
}

// readFences reads the fenced code blocks of the page at path. A fence
// never closed is an error.
func readFences(path string) (*fenced, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	p := &fenced{lines: strings.Split(strings.TrimSuffix(string(b), "\n"), "\n"), inside: map[int]bool{}}
	var cur *fence
	for i, line := range p.lines {
		n := i + 1
		info, isFence := strings.CutPrefix(strings.TrimSpace(line), "```")
		switch {
		case cur != nil && isFence:
			p.fences = append(p.fences, *cur)
			cur = nil
		case cur != nil:
			cur.body += line + "\n"
		case isFence:
			cur = &fence{info: info, line: n}
			if i > 0 {
				cur.before = p.lines[i-1]
			}
		default:
			continue
		}
		p.inside[n] = true
	}
	if cur != nil {
		return nil, fmt.Errorf("%s:%d: a code fence is never closed", path, cur.line)
	}
	return p, nil
}
