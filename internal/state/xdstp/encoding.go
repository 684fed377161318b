package xdstp

import (
	"fmt"
	"strings"
	"unicode/utf8"
)

// charset is a set of ASCII bytes.
type charset [128]bool

func newCharset(sets ...string) *charset {
	var cs charset
	for _, s := range sets {
		for i := range len(s) {
			cs[s[i]] = true
		}
	}
	return &cs
}

func (cs *charset) has(c byte) bool { return c < 128 && cs[c] }

func (cs *charset) without(s string) *charset {
	out := *cs
	for i := range len(s) {
		out[s[i]] = false
	}
	return &out
}

// The RFC 3986 character classes the normalized form keeps literal.
const (
	alnum      = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"
	unreserved = alnum + "-._~"
	subDelims  = "!$&'()*+,;="
)

var (
	// authorityChars: reg-name characters, ':' and '@' (as in host:port
	// and userinfo) and '[' ']' (as in an IP literal).
	authorityChars = newCharset(unreserved, subDelims, ":@[]")
	// segmentChars: RFC 3986 pchar, for the type and each id segment.
	segmentChars = newCharset(unreserved, subDelims, ":@")
	// paramChars: query characters less the parameter delimiters '&' and
	// '=', '+' (a space to form decoders) and ';' (a separator to some).
	paramChars = newCharset(unreserved, subDelims, ":@/?").without("&=+;")
	// neverRaw: bytes RFC 3986 allows nowhere in a URI, bar the controls,
	// space and DEL that the parser rejects on their own.
	neverRaw = newCharset("\"<>\\^`{|}")
)

const upperHex = "0123456789ABCDEF"

// escape appends s to b, percent-encoding every byte not in keep.
func escape(b *strings.Builder, s string, keep *charset) {
	for i := range len(s) {
		c := s[i]
		if keep.has(c) {
			b.WriteByte(c)
			continue
		}
		b.WriteByte('%')
		b.WriteByte(upperHex[c>>4])
		b.WriteByte(upperHex[c&15])
	}
}

// unescape decodes the percent-encodings of raw, the component of name
// that starts at byte offset at (errors give offsets in name). It rejects bytes no URI may hold raw, a '%'
// not followed by two hex digits, and a result that is not UTF-8; what
// names the component in those errors.
func unescape(name, raw string, at int, what string) (string, error) {
	if strings.IndexByte(raw, '%') < 0 {
		if err := checkRaw(name, raw, at, what); err != nil {
			return "", err
		}
		return checkUTF8(name, raw, what)
	}
	out := make([]byte, 0, len(raw))
	for i := 0; i < len(raw); i++ {
		c := raw[i]
		if c != '%' {
			if err := checkRawByte(name, c, at+i, what); err != nil {
				return "", err
			}
			out = append(out, c)
			continue
		}
		if i+2 >= len(raw) || !isHex(raw[i+1]) || !isHex(raw[i+2]) {
			bad := raw[i:min(i+3, len(raw))]
			return "", errorf(name, "bad percent-encoding %q in the %s at byte %d: want '%%' and two hex digits", bad, what, at+i)
		}
		out = append(out, unhex(raw[i+1])<<4|unhex(raw[i+2]))
		i += 2
	}
	return checkUTF8(name, string(out), what)
}

func checkRaw(name, raw string, at int, what string) error {
	for i := range len(raw) {
		if err := checkRawByte(name, raw[i], at+i, what); err != nil {
			return err
		}
	}
	return nil
}

func checkRawByte(name string, c byte, at int, what string) error {
	switch {
	case c < 0x20 || c == 0x7f:
		return errorf(name, "control character %q in the %s at byte %d: percent-encode it", c, what, at)
	case c == ' ':
		return errorf(name, "space in the %s at byte %d: percent-encode it as %%20", what, at)
	case neverRaw.has(c):
		return errorf(name, "character %q in the %s at byte %d is not allowed in a URI: percent-encode it as %%%02X", c, what, at, c)
	}
	return nil
}

func checkUTF8(name, s, what string) (string, error) {
	if !utf8.ValidString(s) {
		return "", errorf(name, "the %s is not valid UTF-8 once percent-decoded", what)
	}
	return s, nil
}

func isHex(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
}

func unhex(c byte) byte {
	switch {
	case c <= '9':
		return c - '0'
	case c <= 'F':
		return c - 'A' + 10
	default:
		return c - 'a' + 10
	}
}

// errorf returns an error that quotes the name it is about.
func errorf(name, format string, args ...any) error {
	return fmt.Errorf("xdstp: name %q: %s", name, fmt.Sprintf(format, args...))
}
