// Package authz owns the authorization rules: which node ids and groups a
// client identity may claim, and which identities are administrators. It
// stores the rules in etcd (one JSON value per identity under
// "<prefix>authz/"), validates them, compiles them into an immutable Table
// that answers "may this identity claim this node and group?", and keeps
// every replica's Table current with a Watcher.
//
// A Watcher also knows how fresh its Table is: when etcd has confirmed
// the rules (a watch response, a progress notification or a reload) less
// recently than WatcherConfig.StaleAfter, Fresh reports them stale and the
// Table's holders are woken, so that a replica cut off from etcd refuses
// clients rather than judge them on rules that may miss a revocation.
//
// It does not establish identities (package tlsfiles reads them from
// verified certificates, typed: the SPIFFE URI SAN "spiffe://TD/PATH",
// else "dns:" and the first DNS SAN, else "cn:" and the Subject CN) and
// does not enforce anything itself: the xDS stream core asks a Table and
// refuses the stream.
//
// # Rules
//
// A Rule binds one identity, compared as an exact string and written with
// its kind ("spiffe://...", "dns:NAME" or "cn:NAME"), to glob patterns
// of node ids (Nodes) and of groups (Groups), and may make it an admin. A
// node's group is the scope it reads besides "default" (see package scope);
// the empty group means the default scope only, and is allowed to every
// identity whose Nodes match. A non-empty group must match one of Groups:
// a rule with no Groups confines its nodes to the default scope.
//
// A rule stored before identities were typed (a bare name) matches no
// client: the Watcher skips it as malformed, naming the fix, and Migrate
// rewrites it to the kind the operator says.
//
// Without a rule an identity is denied everything, unless it is a SPIFFE id
// in the configured default trust domain (Options.DefaultTrustDomain), which
// may then claim any node id and any group but is never an admin. A rule
// for an identity always wins over that default.
//
// # Patterns
//
// '*' matches any run of characters, '/' included; '?' matches exactly one
// character; '\' makes the next character literal; every other character
// is itself. Matching costs at most len(pattern)*len(subject) steps, never
// exponential (see Pattern.Match).
package authz
