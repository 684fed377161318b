package authz

import (
	"strings"
	"testing"
	"unicode"
	"unicode/utf8"
)

func TestPatternMatch(t *testing.T) {
	tests := []struct {
		pattern string
		match   []string
		noMatch []string
	}{
		{pattern: "edge-1", match: []string{"edge-1"}, noMatch: []string{"", "edge-10", "edge-", "Edge-1"}},
		{pattern: "edge-*", match: []string{"edge-", "edge-1", "edge-abc/def"}, noMatch: []string{"edge", "xedge-1"}},
		{pattern: "*", match: []string{"", "a", "a/b/c", "日本"}},
		{pattern: "**", match: []string{"", "x/y"}},
		{pattern: "?", match: []string{"a", "/", "日"}, noMatch: []string{"", "ab"}},
		{pattern: "a?c", match: []string{"abc", "a/c", "a日c"}, noMatch: []string{"ac", "abbc"}},
		{pattern: "*/envoy", match: []string{"/envoy", "ns/edge/envoy"}, noMatch: []string{"envoy", "ns/envoy/x"}},
		{pattern: "a*b*c", match: []string{"abc", "aXbYc", "abbbc", "acbc"}, noMatch: []string{"ab", "acb", "abcd"}},
		{pattern: "*a*a*a*a*b", match: []string{"aaaab", "xaxaxaxaxb"}, noMatch: []string{strings.Repeat("a", 200)}},
		{pattern: `\*`, match: []string{"*"}, noMatch: []string{"a", ""}},
		{pattern: `a\?`, match: []string{"a?"}, noMatch: []string{"ab"}},
		{pattern: `\\*`, match: []string{`\`, `\abc`}, noMatch: []string{"abc"}},
		{pattern: `\a`, match: []string{"a"}, noMatch: []string{`\a`}},
		{pattern: "*.example.org", match: []string{"x.example.org", "a.b.example.org"}, noMatch: []string{"example.org"}},
	}
	for _, tt := range tests {
		t.Run(tt.pattern, func(t *testing.T) {
			p, err := ParsePattern(tt.pattern)
			if err != nil {
				t.Fatal(err)
			}
			if p.String() != tt.pattern {
				t.Errorf("String() = %q, want %q", p.String(), tt.pattern)
			}
			for _, s := range tt.match {
				if !p.Match(s) {
					t.Errorf("%q does not match %q", tt.pattern, s)
				}
			}
			for _, s := range tt.noMatch {
				if p.Match(s) {
					t.Errorf("%q matches %q", tt.pattern, s)
				}
			}
		})
	}
}

func TestPatternLiteral(t *testing.T) {
	for _, tt := range []struct {
		pattern string
		literal bool
		lit     string
	}{
		{"edge-1", true, "edge-1"},
		{`a\*b`, true, "a*b"},
		{`\\`, true, `\`},
		{"a*", false, ""},
		{"a?", false, ""},
	} {
		p := MustParsePattern(tt.pattern)
		if p.IsLiteral() != tt.literal || p.Literal() != tt.lit {
			t.Errorf("%q: IsLiteral, Literal = %v, %q; want %v, %q", tt.pattern, p.IsLiteral(), p.Literal(), tt.literal, tt.lit)
		}
	}
}

func TestParsePatternErrors(t *testing.T) {
	tests := []struct {
		pattern string
		want    string // in the error, besides the quoted pattern
	}{
		{"", "empty"},
		{`edge\`, "trailing backslash"},
		{`a\\\`, "trailing backslash"},
		{"a\nb", "control character U+000A"},
		{"a\x7fb", "control character U+007F"},
		{"a\\\tb", "control character U+0009"},
		{"a\x85b", "not valid UTF-8"},
		{"a\u0085b", "control character U+0085"},
		{strings.Repeat("a", MaxPatternBytes+1), "longer than 1024 bytes"},
	}
	for _, tt := range tests {
		_, err := ParsePattern(tt.pattern)
		if err == nil {
			t.Errorf("ParsePattern(%q) accepted it", tt.pattern)
			continue
		}
		if !strings.Contains(err.Error(), tt.want) || !strings.Contains(err.Error(), "pattern ") {
			t.Errorf("ParsePattern(%q) = %v, want an error naming the pattern and %q", tt.pattern, err, tt.want)
		}
	}
	if _, err := ParsePattern(strings.Repeat("*", MaxPatternBytes)); err != nil {
		t.Errorf("a pattern of exactly %d bytes: %v", MaxPatternBytes, err)
	}
}

func TestQuotePattern(t *testing.T) {
	for _, s := range []string{"plain", "a*b?c", `back\slash`, "*", ""} {
		if s == "" {
			continue
		}
		p := MustParsePattern(QuotePattern(s))
		if !p.IsLiteral() || p.Literal() != s || !p.Match(s) {
			t.Errorf("QuotePattern(%q) = %q: literal %v %q", s, p.String(), p.IsLiteral(), p.Literal())
		}
	}
}

// TestPatternLinear matches the worst cases of a backtracking matcher: a
// pattern of many stars against a long subject that fails at the end.
// With backtracking over every star this would not finish; the
// two-pointer algorithm takes at most len(pattern)*len(subject) steps.
func TestPatternLinear(t *testing.T) {
	p := MustParsePattern(strings.Repeat("a*", 500) + "b")
	s := strings.Repeat("a", 100_000)
	if p.Match(s) {
		t.Fatal("matched")
	}
	if !p.Match(s + "b") {
		t.Fatal("did not match")
	}
}

// refMatch is the obvious recursive matcher over the pattern's text: the
// definition the fuzz target checks Match against, on small inputs. It is
// memoized on (pattern offset, subject offset), or runs of stars would
// make it exponential.
func refMatch(pattern, s string) bool {
	type pos struct{ p, s int }
	memo := map[pos]bool{}
	var match func(pi, si int) bool
	match = func(pi, si int) bool {
		if v, ok := memo[pos{pi, si}]; ok {
			return v
		}
		var ok bool
		defer func() { memo[pos{pi, si}] = ok }()
		if pi == len(pattern) {
			ok = si == len(s)
			return ok
		}
		r, w := utf8.DecodeRuneInString(pattern[pi:])
		switch r {
		case '*':
			// Nothing, or one more character of s.
			ok = match(pi+w, si)
			if !ok && si < len(s) {
				_, sw := utf8.DecodeRuneInString(s[si:])
				ok = match(pi, si+sw)
			}
		case '?':
			if si < len(s) {
				_, sw := utf8.DecodeRuneInString(s[si:])
				ok = match(pi+w, si+sw)
			}
		case '\\':
			_, w2 := utf8.DecodeRuneInString(pattern[pi+w:])
			lit := pattern[pi+w : pi+w+w2]
			ok = strings.HasPrefix(s[si:], lit) && match(pi+w+w2, si+len(lit))
		default:
			ok = strings.HasPrefix(s[si:], pattern[pi:pi+w]) && match(pi+w, si+w)
		}
		return ok
	}
	return match(0, 0)
}

// loneBackslashAtEnd reports whether s ends in an odd run of backslashes:
// its last one escapes nothing.
func loneBackslashAtEnd(s string) bool {
	n := len(s) - len(strings.TrimRight(s, `\`))
	return n%2 == 1
}

// FuzzPattern checks that ParsePattern and Match never panic, that a
// pattern without wildcards matches exactly itself, that a quoted string
// matches exactly itself, and that Match agrees with refMatch on small
// inputs.
func FuzzPattern(f *testing.F) {
	f.Add("edge-*", "edge-1")
	f.Add("a*b*c", "aXbYc")
	f.Add("*/sa/?nvoy", "ns/edge/sa/envoy")
	f.Add(`\*\?\\`, `*?\`)
	f.Add("**a?*", "日本a語")
	f.Add(`a\`, "a")
	f.Add("a\x00", "a\x00")
	f.Fuzz(func(t *testing.T, pattern, s string) {
		p, err := ParsePattern(pattern)
		if err != nil {
			if pattern != "" && len(pattern) <= MaxPatternBytes && utf8.ValidString(pattern) &&
				!loneBackslashAtEnd(pattern) && !strings.ContainsFunc(pattern, unicode.IsControl) {
				t.Fatalf("ParsePattern(%q) rejected a pattern that looks fine: %v", pattern, err)
			}
			if !strings.Contains(err.Error(), "pattern ") {
				t.Fatalf("error does not name the pattern: %v", err)
			}
			return
		}
		got := p.Match(s)
		if !strings.ContainsAny(pattern, `*?\`) {
			if !p.IsLiteral() || !p.Match(pattern) || got != (s == pattern) {
				t.Fatalf("literal pattern %q: Match(%q) = %v, Match(itself) = %v", pattern, s, got, p.Match(pattern))
			}
		}
		if q, err := ParsePattern(QuotePattern(pattern)); err == nil && (!q.Match(pattern) || q.Match(s) != (s == pattern)) {
			t.Fatalf("QuotePattern(%q) = %q does not match exactly %q", pattern, q.String(), pattern)
		}
		if len(pattern) <= 64 && len(s) <= 64 {
			if want := refMatch(pattern, s); got != want {
				t.Fatalf("ParsePattern(%q).Match(%q) = %v, reference says %v", pattern, s, got, want)
			}
		}
	})
}
