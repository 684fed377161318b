// Package xdstp parses, validates and normalizes xdstp:// resource names,
// the structured xDS resource names of xRFC TP1 ("xdstp:// structured
// resource naming, caching and federation support") that gRPC clients use
// as gRFC A47 describes.
//
// It owns no state and does no I/O. Deciding which names a stream may
// subscribe to, and serving them, is the xDS server's job; this package
// only says what a name means and which spelling of it is the normal one.
//
// # What an xdstp name is
//
// TP1 gives the form
//
//	xdstp://[{authority}]/{resource type}/{id/*}?{context parameters}{#processing directive,*}
//
// and xds.core.v3.ResourceName is its proto3 expression: an authority, a
// resource type (the type URL without "type.googleapis.com/", such as
// envoy.config.cluster.v3.Cluster), an opaque id whose '/' "will not be
// escaped during URI encoding and will form part of the URI path", and
// context parameters, a map of string keys to string values. A name that
// does not start with "xdstp:" is an old-style name: an opaque string this
// package leaves alone.
//
// A glob collection (TP1 "Glob") is named by appending a "/*" component to
// a directory of ids: xdstp://auth/envoy.config.listener.v3.Listener/foo/*
// stands for foo/bar, foo/baz and every other resource directly under foo
// with the same authority, type and context parameters.
//
// # The normalized form
//
// TP1 "Normalization": "Two xdstp:// URNs are considered equivalent if they
// match component-wise modulo context parameter ordering." Parse decodes
// each component to the string xds.core.v3.ResourceName would hold, and
// Name.String encodes those components back in one canonical way, so two
// names are equivalent exactly when their normalized forms are equal bytes:
//
//   - every percent-encoding is decoded, and a byte is percent-encoded in
//     the normalized form only when its place requires it, with upper-case
//     hex (RFC 3986 6.2.2.1). In an id, for instance, "%41" becomes "A",
//     "%7e" becomes "~", "%2f" becomes "/" and "%3a" becomes ":", while a
//     decoded space becomes "%20", "%3f" becomes "%3F" and a raw "é"
//     becomes "%C3%A9";
//   - context parameters are sorted by key (gRFC A47: "sorting the context
//     params in normal lexicographic order"), compared as decoded bytes;
//   - the normalized form is printable ASCII.
//
// Which bytes stay literal: in the authority, RFC 3986's unreserved
// characters, sub-delims, ':', '@', '[' and ']'; in the type and each id
// segment, RFC 3986's pchar (unreserved, sub-delims, ':' and '@'), with '/'
// between id segments; in context parameter keys and values, pchar, '/'
// and '?' less '&', '=', '+' and ';'. '&' and '=' delimit parameters; '+'
// is encoded because form decoders (Go's net/url, which grpc-go uses) read
// a literal '+' as a space, and ';' because Go's query parser drops pairs
// that hold one. On input a literal '+' is a plus sign, as RFC 3986 says.
//
// # Choices where the texts are loose
//
// "%2F" in an id is a '/'. RFC 3986 keeps "%2F" and "/" apart, but the id
// of a ResourceName is a decoded string whose '/' is never escaped, so
// the proto3 expression TP1 calls canonical cannot tell them apart, and
// both Envoy (XdsResourceIdentifier) and grpc-go (ParseName) decode the
// path before using it. Keeping them apart here would make Legation treat
// as two resources what every client treats as one. The same holds for
// every other percent-encoding: all of them are decoded, so "%2A" as the
// last id segment makes a glob like "*" does.
//
// The authority may be empty (TP1's "[{authority}]"; gRFC A47: "New-style
// resource names without any authority will use the empty string"). It is
// opaque, so it is not case-folded.
//
// The id must not be empty. Envoy and grpc-go both write an empty id as
// "xdstp://a/T", which grpc-go's ParseName does not take for a new-style
// name, so such a name cannot be served to every client. Its '/'-separated segments must not be empty either ("a//b",
// "/a", "a/"): glob membership is defined by the id's directory structure,
// and an empty segment would make "xdstp://a/T//*" and "xdstp://a/T/*"
// the same collection.
//
// The resource type must look like a protobuf message's full name:
// identifiers joined by dots, with a package (every xDS type has one).
// Whether the type is one Legation serves, and whether it matches the
// type URL of the request carrying the name, is for the caller to check
// (Name.TypeURL, TypeOf).
//
// A context parameter needs a non-empty key and an '='; its value may be
// empty. A key given twice is an error: gRFC A47 leaves duplicates
// undefined, grpc-go keeps the first value while A47 suggests the last,
// and ContextParams is a map that cannot hold both, so any choice here
// would disagree with some client. A bare '?' with no parameters is
// accepted and dropped.
//
// A fragment ('#') is an error: TP1 puts processing directives only in
// resource locators, and "Directives are not part of resource names and
// do not appear in a xDS transport discovery request" (resource_locator.proto).
//
// Only the exact lower-case prefix "xdstp:" marks a new-style name, as TP1
// ("A client and server will detect xdstp:// semantics by examining the
// prefix of a resource string") and gRFC A47 ("If the resulting resource
// name starts with xdstp:") say and Envoy does; "XDSTP://..." is an opaque
// old-style name. A name that starts with "xdstp:" but is not a valid
// xdstp name is an error, never silently an opaque name.
//
// Raw ASCII bytes that RFC 3986 allows nowhere in a URI are errors: the
// controls, space, DEL and the characters " < > \ ^ ` { | }. Raw non-ASCII
// bytes are accepted, as in an IRI (RFC 3987), and percent-encoded in the
// normalized form. Every decoded component must be valid UTF-8, as the proto3 string
// fields of ResourceName require.
//
// A glob contains only its direct children: TP1 says resources in a glob
// collection "share a directory structure", its example has foo/* match
// foo/bar and foo/baz, and one of its authors answered (cncf/xds#91) that
// a resource belongs only to the glob of its own directory, so foo/* does
// not contain foo/bar/baz.
package xdstp
