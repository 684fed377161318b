package xdstp

import (
	"slices"
	"strings"
)

// Collection returns the glob collection n is a member of: the glob over
// the directory of n's id, with n's authority, type and context
// parameters. For a glob it returns n itself. Its String is the key to
// look a member's glob subscription up by, since TP1 "Glob" holds that "A
// request for xdstp://some-authority/envoy.config.listener.v3.Listener/foo/*?some=thing
// will match a resource
// xdstp://some-authority/envoy.config.listener.v3.Listener/foo/bar?some=thing
// but not xdstp://some-authority/envoy.config.listener.v3.Listener/foo/bar":
// the context parameters must be the same, not merely a superset.
func (n Name) Collection() Name {
	c := n
	c.Params = slices.Clone(n.Params)
	if n.Glob {
		return c
	}
	c.Glob = true
	c.ID = dir(n.ID)
	return c
}

// CollectionOf returns the String of the glob collection the resource
// named name is a member of, name being in the normalized form
// (Name.String): the same as parsing it and taking Collection, without
// the parse. Normalized, a name's '?' is the query's start and its last
// '/' before it ends the id's directory, since both are escaped anywhere
// else. ok is false for an old-style name or a glob. A stream evaluates
// this for every change it is told of while it holds a glob
// subscription, so it costs one string and no parse.
func CollectionOf(name string) (glob string, ok bool) {
	if !strings.HasPrefix(name, prefix) {
		return "", false
	}
	path, query := name, ""
	if q := strings.IndexByte(name, '?'); q >= 0 {
		path, query = name[:q], name[q:]
	}
	slash := strings.LastIndexByte(path, '/')
	if slash < len(prefix) || path[slash+1:] == "*" {
		return "", false
	}
	return path[:slash] + "/*" + query, true
}

// IsGlob reports whether name, in the normalized form (Name.String),
// is a glob collection: an xdstp name whose path ends in "/*". Like
// CollectionOf, it reads the string and does not parse it.
func IsGlob(name string) bool {
	if !strings.HasPrefix(name, prefix) {
		return false
	}
	if q := strings.IndexByte(name, '?'); q >= 0 {
		name = name[:q]
	}
	return strings.HasSuffix(name, "/*")
}

// dir returns the directory of a member's id: all before its last '/',
// or "" when it has none.
func dir(id string) string {
	if i := strings.LastIndexByte(id, '/'); i >= 0 {
		return id[:i]
	}
	return ""
}

// Contains reports whether n is a glob collection and member one of its
// resources. TP1 "Glob": resources in a glob collection "share a directory
// structure and a /* component is appended to the resource path", so a
// member is a direct child: foo/* contains foo/bar but neither foo/bar/baz
// nor foo (see the package comment). The member must have n's authority,
// type and context parameters exactly, and must not be a glob itself.
func (n Name) Contains(member Name) bool {
	return n.Glob && !member.Glob && n.Authority == member.Authority &&
		n.Type == member.Type && n.ID == dir(member.ID) &&
		slices.Equal(n.Params, member.Params)
}
