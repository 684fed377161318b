package xdstp

import (
	"fmt"
	"slices"
	"strings"
)

// Authorities is the set of authorities a cluster serves (xds-node
// --authority): the resources it serves are those with old-style names,
// xdstp names of the empty authority, and xdstp names of one of these.
// The zero value serves no named authority.
type Authorities struct {
	set map[string]bool
}

// NewAuthorities returns the set of names, each an authority as it
// appears decoded in a name (e.g. "fed-a", "xds.example.com:443"). An
// empty name, one given twice, or one that holds a character an
// authority never does ('/', '?', '#', ',', a space or a control
// character) is an error naming it.
func NewAuthorities(names []string) (Authorities, error) {
	a := Authorities{set: make(map[string]bool, len(names))}
	for _, n := range names {
		switch {
		case n == "":
			return Authorities{}, fmt.Errorf("authority %q: empty: names of the empty authority (xdstp:///...) are always served", n)
		case strings.ContainsAny(n, "/?#,") || strings.IndexFunc(n, func(r rune) bool { return r <= ' ' || r == 0x7f }) >= 0:
			return Authorities{}, fmt.Errorf("authority %q holds '/', '?', '#', ',', a space or a control character", n)
		case a.set[n]:
			return Authorities{}, fmt.Errorf("authority %q is given twice", n)
		}
		a.set[n] = true
	}
	return a, nil
}

// Serves reports whether a cluster serving a serves the resource named
// name: an old-style name, an xdstp name of the empty authority or of
// one in a. A malformed xdstp name is not served.
func (a Authorities) Serves(name string) bool {
	if !IsXDSTP(name) {
		return true
	}
	n, err := Parse(name)
	return err == nil && a.ServesAuthority(n.Authority)
}

// ServesAuthority reports whether a cluster serving a serves the names
// of authority auth (decoded): the empty one, or one in a.
func (a Authorities) ServesAuthority(auth string) bool { return auth == "" || a.set[auth] }

// Names is the authorities, sorted.
func (a Authorities) Names() []string {
	out := make([]string, 0, len(a.set))
	for n := range a.set {
		out = append(out, n)
	}
	slices.Sort(out)
	return out
}

// AuthorityOf returns the authority of an xdstp name, decoded; ok is
// false for an old-style name or a malformed one.
func AuthorityOf(name string) (authority string, ok bool) {
	n, err := Parse(name)
	if err != nil {
		return "", false
	}
	return n.Authority, true
}
