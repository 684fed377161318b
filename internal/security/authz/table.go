package authz

import (
	"errors"
	"fmt"
	"slices"
	"strings"
)

// ErrDenied is matched (errors.Is) by every error Table.Allows returns, so
// that the caller can tell a refusal from a failure and map it to its
// protocol's "permission denied".
var ErrDenied = errors.New("authz: denied")

// deniedError is a refusal. Its message says why in terms of the asking
// identity only: it never reveals another identity's rule.
type deniedError struct{ reason string }

func (e *deniedError) Error() string        { return e.reason }
func (e *deniedError) Is(target error) bool { return target == ErrDenied }

func denied(format string, args ...any) error {
	return &deniedError{reason: fmt.Sprintf(format, args...)}
}

// Options are the settings of a Table besides its rules.
type Options struct {
	// DefaultTrustDomain, if not empty, lets every SPIFFE id
	// spiffe://DefaultTrustDomain/PATH that has no rule of its own claim
	// any node id and any group (never admin). Empty: an identity without
	// a rule is denied.
	DefaultTrustDomain string
}

// Validate checks the options.
func (o Options) Validate() error {
	if o.DefaultTrustDomain == "" {
		return nil
	}
	if err := ValidateTrustDomain(o.DefaultTrustDomain); err != nil {
		return fmt.Errorf("authz: default trust domain: %w", err)
	}
	return nil
}

// Table is an immutable snapshot of every rule, compiled. Its methods may
// be called concurrently and never block. The zero Table denies
// everything.
type Table struct {
	rules    map[string]*compiled // by identity
	opts     Options
	revision int64
}

// compiled is a rule with its patterns parsed.
type compiled struct {
	rule   Rule
	nodes  []Pattern
	groups []Pattern
}

func compile(r Rule) (*compiled, error) {
	if err := r.Validate(); err != nil {
		return nil, err
	}
	c := &compiled{rule: cloneRule(r)}
	for _, n := range r.Nodes {
		c.nodes = append(c.nodes, MustParsePattern(n)) // validated above
	}
	for _, g := range r.Groups {
		c.groups = append(c.groups, MustParsePattern(g))
	}
	return c, nil
}

// NewTable compiles rules into a Table. Every rule must be valid, and no
// two may have the same identity.
func NewTable(rules []Rule, opts Options) (*Table, error) {
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	t := &Table{rules: make(map[string]*compiled, len(rules)), opts: opts}
	for _, r := range rules {
		c, err := compile(r)
		if err != nil {
			return nil, fmt.Errorf("authz: %w", err)
		}
		if _, dup := t.rules[r.Identity]; dup {
			return nil, fmt.Errorf("authz: two rules for identity %q", r.Identity)
		}
		t.rules[r.Identity] = c
	}
	return t, nil
}

// newTableOf builds a Table from rules already compiled (the watcher's),
// read at etcd revision rev.
func newTableOf(rules map[string]*compiled, opts Options, rev int64) *Table {
	t := &Table{rules: make(map[string]*compiled, len(rules)), opts: opts, revision: rev}
	for _, c := range rules {
		t.rules[c.rule.Identity] = c
	}
	return t
}

// Allows returns nil if identity may claim node id nodeID in group
// (empty: the default scope only), and otherwise an error matching
// ErrDenied whose message says why, naming only identity, nodeID and
// group:
//
//	no rule for identity "spiffe://example.org/x"
//	identity "spiffe://example.org/x" may not claim node "n1"
//	identity "spiffe://example.org/x" may not claim group "edge" (node "n1")
//
// A rule for the identity decides alone; without one, a SPIFFE id of the
// default trust domain is allowed anything.
func (t *Table) Allows(identity, nodeID, group string) error {
	c, ok := t.rules[identity]
	if !ok {
		if td, isSPIFFE := trustDomainOf(identity); isSPIFFE && td == t.opts.DefaultTrustDomain && td != "" {
			return nil
		}
		return denied("no rule for identity %q", identity)
	}
	if !matchAny(c.nodes, nodeID) {
		return denied("identity %q may not claim node %q", identity, nodeID)
	}
	if group != "" && !matchAny(c.groups, group) {
		return denied("identity %q may not claim group %q (node %q)", identity, group, nodeID)
	}
	return nil
}

func matchAny(ps []Pattern, s string) bool {
	for _, p := range ps {
		if p.Match(s) {
			return true
		}
	}
	return false
}

// Admin reports whether identity's rule makes it an admin. The default
// trust domain never does.
func (t *Table) Admin(identity string) bool {
	c, ok := t.rules[identity]
	return ok && c.rule.Admin
}

// Rules returns a copy of the rules, sorted by identity.
func (t *Table) Rules() []Rule {
	out := make([]Rule, 0, len(t.rules))
	for _, c := range t.rules {
		out = append(out, cloneRule(c.rule))
	}
	slices.SortFunc(out, func(a, b Rule) int { return strings.Compare(a.Identity, b.Identity) })
	return out
}

// Len returns the number of rules.
func (t *Table) Len() int { return len(t.rules) }

// Revision returns the etcd revision the table was read at; 0 for a table
// not read from etcd (NewTable's, or a Watcher's before its first load).
func (t *Table) Revision() int64 { return t.revision }

// DefaultTrustDomain returns the table's Options.DefaultTrustDomain.
func (t *Table) DefaultTrustDomain() string { return t.opts.DefaultTrustDomain }

func cloneRule(r Rule) Rule {
	r.Nodes = slices.Clone(r.Nodes)
	r.Groups = slices.Clone(r.Groups)
	return r
}
