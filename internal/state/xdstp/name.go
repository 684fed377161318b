package xdstp

import (
	"cmp"
	"slices"
	"strings"
)

// prefix starts every xdstp name; marker is what tells one from an
// old-style name (TP1, gRFC A47).
const (
	prefix = "xdstp://"
	marker = "xdstp:"
)

// TypeURLPrefix is what a resource type becomes a type URL with
// (xds_protocol.rst: "type.googleapis.com/<resource type>").
const TypeURLPrefix = "type.googleapis.com/"

// Name is a parsed xdstp name: its components percent-decoded, as
// xds.core.v3.ResourceName holds them. The zero Name is not a valid name.
// Names are values; Collection returns one that shares no memory with n.
type Name struct {
	// Authority is the opaque authority; it may be empty.
	Authority string
	// Type is the resource type: a protobuf message's full name, such as
	// envoy.config.cluster.v3.Cluster.
	Type string
	// ID is the id, its segments separated by '/'. For a glob it is the
	// directory the glob stands for, without the "/*"; "" is the glob
	// over the whole type (xdstp://auth/T/*).
	ID string
	// Params are the context parameters. Parse returns them sorted by Key,
	// keys distinct, and nil when there are none.
	Params []Param
	// Glob says the name ends its id with "/*": a glob collection.
	Glob bool
}

// Param is one context parameter, decoded.
type Param struct {
	Key, Value string
}

// IsXDSTP reports whether name is a new-style name: whether it starts with
// "xdstp:", the prefix TP1 and gRFC A47 detect new-style names by. Case
// matters, as it does to Envoy. A name IsXDSTP accepts may still fail to
// Parse.
func IsXDSTP(name string) bool {
	return strings.HasPrefix(name, marker)
}

// Parse parses an xdstp name. It fails, naming the problem and quoting s,
// for any string that is not a valid xdstp name, old-style names included;
// the package comment lists the rules.
func Parse(s string) (Name, error) {
	if !IsXDSTP(s) {
		return Name{}, errorf(s, `not an xdstp name: want the scheme "xdstp://"`)
	}
	rest, ok := strings.CutPrefix(s, prefix)
	if !ok {
		return Name{}, errorf(s, `"xdstp:" must be followed by "//" and the authority`)
	}
	if i := strings.IndexByte(rest, '#'); i >= 0 {
		return Name{}, errorf(s, "fragment %q at byte %d: processing directives belong to resource locators, not resource names", rest[i:], len(prefix)+i)
	}
	rest, query, hasQuery := strings.Cut(rest, "?")
	rawAuth, path, ok := strings.Cut(rest, "/")
	if !ok {
		return Name{}, errorf(s, `missing the resource type: want "xdstp://{authority}/{resource type}/{id}"`)
	}
	var n Name
	var err error
	if n.Authority, err = unescape(s, rawAuth, len(prefix), "authority"); err != nil {
		return Name{}, err
	}
	at := len(prefix) + len(rawAuth) + 1
	rawType, rawID, ok := strings.Cut(path, "/")
	if n.Type, err = parseType(s, rawType, at); err != nil {
		return Name{}, err
	}
	at += len(rawType) + 1
	if !ok || rawID == "" {
		return Name{}, errorf(s, `missing the id after the resource type %q: want "xdstp://{authority}/{resource type}/{id}"`, n.Type)
	}
	if n.ID, n.Glob, err = parseID(s, rawID, at); err != nil {
		return Name{}, err
	}
	if hasQuery {
		if n.Params, err = parseParams(s, query, len(s)-len(query)); err != nil {
			return Name{}, err
		}
	}
	return n, nil
}

// parseType decodes and checks the resource type segment.
func parseType(name, raw string, at int) (string, error) {
	if raw == "" {
		return "", errorf(name, `missing the resource type: want "xdstp://{authority}/{resource type}/{id}"`)
	}
	typ, err := unescape(name, raw, at, "resource type")
	if err != nil {
		return "", err
	}
	if !isMessageName(typ) {
		return "", errorf(name, "resource type %q is not a protobuf message name such as envoy.config.cluster.v3.Cluster", typ)
	}
	return typ, nil
}

// isMessageName reports whether s is a protobuf full name with a package:
// identifiers ([A-Za-z_][A-Za-z0-9_]*) joined by at least one dot.
func isMessageName(s string) bool {
	parts := strings.Split(s, ".")
	if len(parts) < 2 {
		return false
	}
	for _, p := range parts {
		if p == "" || '0' <= p[0] && p[0] <= '9' {
			return false
		}
		for i := range len(p) {
			if c := p[i]; c != '_' && !alnumSet.has(c) {
				return false
			}
		}
	}
	return true
}

var alnumSet = newCharset(alnum)

// parseID decodes the id and splits off a glob's "/*".
func parseID(name, raw string, at int) (id string, glob bool, err error) {
	id, err = unescape(name, raw, at, "id")
	if err != nil {
		return "", false, err
	}
	for seg := range strings.SplitSeq(id, "/") {
		if seg == "" {
			return "", false, errorf(name, `empty segment in the id %q (a leading, trailing or doubled '/', "%%2F" included): id segments must not be empty`, id)
		}
	}
	if id == "*" {
		return "", true, nil
	}
	if dir, ok := strings.CutSuffix(id, "/*"); ok {
		return dir, true, nil
	}
	return id, false, nil
}

// parseParams parses the query, which starts at byte offset at of name.
func parseParams(name, query string, at int) ([]Param, error) {
	if query == "" {
		return nil, nil
	}
	var params []Param
	for pair := range strings.SplitSeq(query, "&") {
		rawKey, rawValue, ok := strings.Cut(pair, "=")
		switch {
		case pair == "":
			return nil, errorf(name, "empty context parameter at byte %d: want key=value pairs joined by '&'", at)
		case !ok:
			return nil, errorf(name, "context parameter %q at byte %d has no '=': want key=value", pair, at)
		case rawKey == "":
			return nil, errorf(name, "context parameter %q at byte %d has an empty key", pair, at)
		}
		key, err := unescape(name, rawKey, at, "context parameter key")
		if err != nil {
			return nil, err
		}
		value, err := unescape(name, rawValue, at+len(rawKey)+1, "context parameter value")
		if err != nil {
			return nil, err
		}
		params = append(params, Param{Key: key, Value: value})
		at += len(pair) + 1
	}
	slices.SortFunc(params, compareParams)
	for i := 1; i < len(params); i++ {
		if params[i].Key == params[i-1].Key {
			return nil, errorf(name, "context parameter %q is given more than once (values %q and %q): gRFC A47 leaves duplicates undefined", params[i].Key, params[i-1].Value, params[i].Value)
		}
	}
	return params, nil
}

func compareParams(a, b Param) int {
	return cmp.Or(strings.Compare(a.Key, b.Key), strings.Compare(a.Value, b.Value))
}

// String returns n's normalized form (see the package comment): equivalent
// names have equal normalized forms, and Parse of it returns a Name Equal
// to n. That promise holds for Names Parse returned; a Name built by hand
// with components Parse would reject (an empty Type, an empty id segment,
// a repeated key) yields a string Parse rejects.
func (n Name) String() string {
	var b strings.Builder
	b.Grow(len(prefix) + len(n.Authority) + len(n.Type) + len(n.ID) + 8)
	b.WriteString(prefix)
	escape(&b, n.Authority, authorityChars)
	b.WriteByte('/')
	escape(&b, n.Type, segmentChars)
	b.WriteByte('/')
	for i, seg := range strings.Split(n.ID, "/") {
		if i > 0 {
			b.WriteByte('/')
		}
		escape(&b, seg, segmentChars)
	}
	if n.Glob {
		if n.ID != "" {
			b.WriteByte('/')
		}
		b.WriteByte('*')
	}
	params := n.Params
	if !slices.IsSortedFunc(params, compareParams) {
		params = slices.SortedFunc(slices.Values(params), compareParams)
	}
	for i, p := range params {
		b.WriteByte("?&"[min(i, 1)])
		escape(&b, p.Key, paramChars)
		b.WriteByte('=')
		escape(&b, p.Value, paramChars)
	}
	return b.String()
}

// Equal reports whether n and m are the same name: component-wise equal,
// which for Names Parse returned is TP1's equivalence.
func (n Name) Equal(m Name) bool {
	return n.Authority == m.Authority && n.Type == m.Type && n.ID == m.ID &&
		n.Glob == m.Glob && slices.Equal(n.Params, m.Params)
}

// TypeURL returns the type URL of n's resource type, to compare with the
// type URL of the request or resource that carries the name.
func (n Name) TypeURL() string {
	return TypeURLPrefix + n.Type
}

// Normalize returns the normalized form of an xdstp name, or an error
// naming what is wrong with it. Any name IsXDSTP rejects is an opaque
// old-style name, returned unchanged with a nil error.
func Normalize(name string) (string, error) {
	if !IsXDSTP(name) {
		return name, nil
	}
	n, err := Parse(name)
	if err != nil {
		return "", err
	}
	return n.String(), nil
}

// TypeOf returns the resource type of an xdstp name, and false for an
// old-style name or an invalid one. A caller checks it against the type
// URL a name arrives under: TypeURLPrefix+typ must equal it.
func TypeOf(name string) (typ string, ok bool) {
	n, err := Parse(name)
	if err != nil {
		return "", false
	}
	return n.Type, true
}
