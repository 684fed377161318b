package rollout

import (
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/legation-io/legation/internal/state/resource"
)

// A Selector picks a rollout's canary nodes: a share of all nodes ("10%",
// by a hash of the node id, so the same nodes on every replica, and the
// nodes of 5% among those of 10%), the nodes whose id matches a pattern
// ("node:edge-eu-*", '*' any run of characters, '?' one), or the nodes of
// a group ("group:canary").
type Selector struct {
	text    string
	basis   uint64 // a share, in hundredths of a percent (1..10000); 0 for none
	pattern *regexp.Regexp
	group   string
}

// ParseSelector parses a selector; the error names what is wrong.
func ParseSelector(s string) (Selector, error) {
	sel := Selector{text: s}
	switch {
	case strings.HasSuffix(s, "%"):
		p, err := strconv.ParseFloat(strings.TrimSuffix(s, "%"), 64)
		if err != nil || !(p > 0 && p <= 100) || p*100 < 1 { // NaN fails the first
			return Selector{}, fmt.Errorf("selector %q: a share of nodes is a percentage above 0 and at most 100, in steps of 0.01", s)
		}
		sel.basis = uint64(p*100 + 0.5)
	case strings.HasPrefix(s, "node:"):
		pat := strings.TrimPrefix(s, "node:")
		if pat == "" {
			return Selector{}, fmt.Errorf("selector %q: node: needs a pattern of node ids, as in node:edge-eu-*", s)
		}
		if !utf8.ValidString(pat) {
			return Selector{}, fmt.Errorf("selector %q: the pattern is not UTF-8", s)
		}
		re := regexp.QuoteMeta(pat)
		re = strings.ReplaceAll(re, `\*`, ".*")
		re = strings.ReplaceAll(re, `\?`, ".")
		var err error
		if sel.pattern, err = regexp.Compile("^" + re + "$"); err != nil {
			return Selector{}, fmt.Errorf("selector %q: %v", s, err)
		}
	case strings.HasPrefix(s, "group:"):
		g := strings.TrimPrefix(s, "group:")
		if err := resource.ValidateScope(g); err != nil {
			return Selector{}, fmt.Errorf("selector %q: %v", s, err)
		}
		sel.group = g
	default:
		return Selector{}, fmt.Errorf("selector %q: want a share of nodes (10%%), node:PATTERN or group:NAME", s)
	}
	return sel, nil
}

// String is the selector as parsed.
func (s Selector) String() string { return s.text }

// Matches reports whether the selector picks the node of id and group.
func (s Selector) Matches(id, group string) bool {
	switch {
	case s.basis > 0:
		return Bucket(id) < s.basis
	case s.pattern != nil:
		return s.pattern.MatchString(id)
	case s.group != "":
		return group == s.group
	}
	return false
}

// Bucket is where a node id falls among 10,000 buckets: a share selector
// of p percent picks the nodes of buckets below p*100. It is a hash of the
// id alone, the same on every replica and for every rollout.
func Bucket(id string) uint64 {
	sum := sha256.Sum256([]byte(id)) // evenly spread, unlike a short hash of similar ids
	return binary.BigEndian.Uint64(sum[:8]) % 10000
}
