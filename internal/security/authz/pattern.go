package authz

import (
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"
)

// MaxPatternBytes bounds a pattern's length, and so the cost of matching
// it.
const MaxPatternBytes = 1024

// Pattern is a compiled glob over node ids or groups. The zero Pattern
// matches only the empty string; ParsePattern never returns it.
type Pattern struct {
	raw   string
	elems []elem
	// literal: no wildcard, so the pattern matches exactly lit.
	literal bool
	lit     string
}

type elemKind uint8

const (
	elemLit  elemKind = iota // the bytes of lit
	elemOne                  // '?': one character
	elemStar                 // '*': any run of characters
)

// elem is one element of a pattern: a literal character (its UTF-8 bytes),
// '?' or '*'.
type elem struct {
	kind elemKind
	lit  string
}

// ParsePattern compiles s. It rejects the empty pattern, one longer than
// MaxPatternBytes, invalid UTF-8, control characters, and a trailing lone
// backslash; the error names the pattern and the problem.
func ParsePattern(s string) (Pattern, error) {
	switch {
	case s == "":
		return Pattern{}, fmt.Errorf("pattern %q: empty", s)
	case len(s) > MaxPatternBytes:
		return Pattern{}, fmt.Errorf("pattern %.32q...: longer than %d bytes (%d)", s, MaxPatternBytes, len(s))
	case !utf8.ValidString(s):
		return Pattern{}, fmt.Errorf("pattern %q: not valid UTF-8", s)
	}
	p := Pattern{raw: s, literal: true}
	var lit strings.Builder
	for i := 0; i < len(s); {
		r, w := utf8.DecodeRuneInString(s[i:])
		if unicode.IsControl(r) {
			return Pattern{}, fmt.Errorf("pattern %q: control character %U at byte %d", s, r, i)
		}
		switch r {
		case '*':
			// "**" is "*": keeping one keeps matching linear in the
			// number of elements.
			if n := len(p.elems); n == 0 || p.elems[n-1].kind != elemStar {
				p.elems = append(p.elems, elem{kind: elemStar})
			}
			p.literal = false
		case '?':
			p.elems = append(p.elems, elem{kind: elemOne})
			p.literal = false
		case '\\':
			if i+w == len(s) {
				return Pattern{}, fmt.Errorf("pattern %q: trailing backslash (write \\\\ for a literal one)", s)
			}
			i += w
			r, w = utf8.DecodeRuneInString(s[i:])
			if unicode.IsControl(r) {
				return Pattern{}, fmt.Errorf("pattern %q: control character %U at byte %d", s, r, i)
			}
			fallthrough
		default:
			p.elems = append(p.elems, elem{kind: elemLit, lit: s[i : i+w]})
			lit.WriteString(s[i : i+w])
		}
		i += w
	}
	if p.literal {
		p.lit = lit.String()
	}
	return p, nil
}

// MustParsePattern is ParsePattern for patterns known to be valid; it
// panics on an error. For tests and constants.
func MustParsePattern(s string) Pattern {
	p, err := ParsePattern(s)
	if err != nil {
		panic(err)
	}
	return p
}

// String returns the pattern as it was written.
func (p Pattern) String() string { return p.raw }

// IsLiteral reports whether the pattern has no wildcard, and so matches
// exactly one string: Literal.
func (p Pattern) IsLiteral() bool { return p.literal }

// Literal returns the one string a pattern without wildcards matches (its
// escapes removed); "" for a pattern with wildcards.
func (p Pattern) Literal() string { return p.lit }

// Match reports whether p matches all of s. A '?' or a '*' consumes whole
// UTF-8 characters of s (an invalid byte counts as one character).
//
// It is the two-pointer wildcard algorithm: on a mismatch it goes back only
// to the last '*' seen, never further, since what an earlier '*' absorbed
// cannot change whether the rest matches. So it takes at most
// len(p.elems)*len(s) steps, whatever the input.
func (p Pattern) Match(s string) bool {
	if p.literal {
		return s == p.lit
	}
	e := p.elems
	i, j := 0, 0 // next element, next byte of s
	star, mark := -1, 0
	for j < len(s) {
		if i < len(e) {
			switch e[i].kind {
			case elemStar:
				// Let the '*' match nothing for now; remember where to
				// resume if the rest fails.
				star, mark = i, j
				i++
				continue
			case elemOne:
				_, w := utf8.DecodeRuneInString(s[j:])
				i, j = i+1, j+w
				continue
			case elemLit:
				if lit := e[i].lit; strings.HasPrefix(s[j:], lit) {
					i, j = i+1, j+len(lit)
					continue
				}
			}
		}
		if star < 0 {
			return false
		}
		// Let the last '*' absorb one more character and retry after it.
		_, w := utf8.DecodeRuneInString(s[mark:])
		mark += w
		i, j = star+1, mark
	}
	for i < len(e) && e[i].kind == elemStar {
		i++
	}
	return i == len(e)
}

// QuotePattern returns a pattern that matches exactly s: its wildcards and
// backslashes escaped.
func QuotePattern(s string) string {
	if !strings.ContainsAny(s, `*?\`) {
		return s
	}
	var b strings.Builder
	for _, r := range s {
		if r == '*' || r == '?' || r == '\\' {
			b.WriteByte('\\')
		}
		b.WriteRune(r)
	}
	return b.String()
}
