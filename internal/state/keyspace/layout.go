package keyspace

// Writer is the kind of client that writes a directory. etcd's
// least-privilege roles grant the writes from it: the replicas' role
// writes exactly the directories whose Writer is Replica, the admin role
// the whole prefix.
type Writer uint8

// The writers.
const (
	// Admin is the operator's tools: xdsadmin, and the tools that write
	// resources through the store (the load generator, the chaos runner).
	Admin Writer = iota + 1
	// Replica is xds-node: each replica writes its own keys.
	Replica
)

func (w Writer) String() string {
	switch w {
	case Admin:
		return "admin"
	case Replica:
		return "replica"
	}
	return "unknown"
}

// An Entry is one kind of key of the layout: a row of the table of
// docs/reference/etcd-key-layout.md.
type Entry struct {
	// Dir is the directory the keys are in.
	Dir Dir
	// Key is the rest of the key after the directory, its variable parts
	// in angle brackets.
	Key string
	// Value says what a key holds, how it is encoded, and under which
	// lease, if any, it is written.
	Value string
	// Writer is who writes the keys; WrittenBy names the commands or
	// parts that do.
	Writer    Writer
	WrittenBy string
	// ReadBy names who reads the keys.
	ReadBy string
	// Controller: the replicas' rollout controller writes the directory
	// too (it promotes and aborts rollouts), so the replicas' etcd role
	// may write it while the controller runs on them.
	Controller bool
}

// layout is every kind of key under the prefix, in the order of the
// docs' table. A Dir has one Writer in all its entries.
var layout = []Entry{{
	Dir:        Resources,
	Key:        "<type>/<scope>/<name>",
	Value:      "`legation.v1.Envelope` (protobuf): the resource as a `google.protobuf.Any`, the TTL asked for, who wrote it and when; a TTL'd resource is under its apply's lease",
	Writer:     Admin,
	WrittenBy:  "`xdsadmin apply`, `delete`; the load generator and the chaos runner, through the store",
	ReadBy:     "every replica's view, which watches this directory alone; `xdsadmin get`, `diff`, `watch`, `export`, `ttl`",
	Controller: true,
}, {
	Dir:        Applies,
	Key:        "<scope>",
	Value:      "the scope's apply marker (JSON: `by`, `at`, `traceparent`), put in the transaction of every write of the store to the scope's resources",
	Writer:     Admin,
	WrittenBy:  "every write through the store",
	ReadBy:     "the store's applies, which compare it; replicas with traces on, for an apply's trace context",
	Controller: true,
}, {
	Dir:        History,
	Key:        "<apply id>/<part, 4 digits>",
	Value:      "the history record of one transaction of an apply (JSON: `id`, `part`, `parts`, `kind`, `by`, `at`, `message`, `traceparent`, `changes` with each resource's body from before, `omitted`, `undo`), put in the same transaction; the apply id starts with its time, so keys sort by age, and each transaction deletes the records past the newest `--history-keep`",
	Writer:     Admin,
	WrittenBy:  "every write through the store",
	ReadBy:     "`xdsadmin history`",
	Controller: true,
}, {
	Dir:        Rollouts,
	Key:        "<rollout id>",
	Value:      "a canary rollout (JSON: `id`, `scope`, `selector`, `bake`, `maxRejections`, `promote`, `state`, `reason`, `by`, `at`, `message`, `revision`, `resources` with each one's revision when it began, `endedAt`, `promotedBy`), put in the transaction that writes its canary overlay (resources in scope `~rollout.<rollout id>`), and rewritten in the one that promotes or aborts it; the rollout id is the id of the apply that began it, so keys sort by age, and each rollout begun deletes the ended records past the newest 100",
	Writer:     Admin,
	WrittenBy:  "`xdsadmin apply --canary`, `rollout promote`, `rollout abort`",
	ReadBy:     "every replica (which nodes see which overlay); `xdsadmin rollout`",
	Controller: true,
}, {
	Dir:       Locks,
	Key:       lockApply + "<scope>/<lease, hex>",
	Value:     "the scope's apply lock (etcd `concurrency.Mutex` keys, empty), under the lock holder's session lease (10 s TTL)",
	Writer:    Admin,
	WrittenBy: "writes that take the scope's lock (`xdsadmin apply`, `delete`)",
	ReadBy:    "the same, waiting their turn",
}, {
	Dir:       Locks,
	Key:       lockHolders + "<lease, 16 hex digits>",
	Value:     "who holds or waits for an apply lock (JSON: `by`, `scope`, `since`), under the same lease",
	Writer:    Admin,
	WrittenBy: "writes that take the scope's lock",
	ReadBy:    "a write that timed out waiting for the lock, to name its holder",
}, {
	Dir:       Leases,
	Key:       "<lease, 16 hex digits>",
	Value:     "the lease's refresh marker (JSON: `ttl_seconds`, `refreshed_at`, `by`), under the lease it names",
	Writer:    Admin,
	WrittenBy: "`xdsadmin ttl refresh`",
	ReadBy:    "every replica's lease tracker, which heartbeats the lease's resources at once",
}, {
	Dir:       Status,
	Key:       "<node id>",
	Value:     "the node's status record (JSON), under its home replica's lease",
	Writer:    Replica,
	WrittenBy: "the replica serving the node's streams",
	ReadBy:    "every replica's CSDS cache; `xdsadmin status`, `members`",
}, {
	Dir:       Members,
	Key:       "<replica name>",
	Value:     "the replica's record (JSON: `name`, `xds_addr`, `http_addr`, `gossip_addr`, `started`, `ready`, `version`, `authorities`), under its lease",
	Writer:    Replica,
	WrittenBy: "the replica itself",
	ReadBy:    "every replica, whose ring holds only registered members; `xdsadmin members`; `xdsadmin apply`, for the authorities served",
}, {
	Dir:       Elections,
	Key:       "rollouts/<lease, hex>",
	Value:     "a replica's candidacy to run the rollout controller (etcd `concurrency.Election` keys; the value is the replica's name), under its session lease (5 s TTL): the oldest key leads",
	Writer:    Replica,
	WrittenBy: "every replica",
	ReadBy:    "the replicas, to elect the leader",
}, {
	Dir:       Load,
	Key:       "<replica>/<window start, unix ms, 20 digits>",
	Value:     "one load window of the replica (JSON: `replica`, `start`, `end`, rows of cluster, service, locality, node and counts), under its own lease",
	Writer:    Replica,
	WrittenBy: "the replica whose LRS streams received the reports",
	ReadBy:    "`xdsadmin load`; every replica's `/debug/load`",
}, {
	Dir:       Authz,
	Key:       "<identity, URL-path-escaped>",
	Value:     "the identity's authorization rule (JSON: `identity`, `nodes`, `groups`, `admin`)",
	Writer:    Admin,
	WrittenBy: "`xdsadmin authz grant`, `revoke`, `migrate`",
	ReadBy:    "every replica's rule watcher; `xdsadmin authz list`",
}}

// Layout returns every kind of key under the prefix, in the order of the
// docs' table.
func Layout() []Entry { return append([]Entry(nil), layout...) }

// Dirs returns every directory under the prefix, in Layout's order.
func Dirs() []Dir {
	var out []Dir
	for i, e := range layout {
		if i == 0 || layout[i-1].Dir != e.Dir {
			out = append(out, e.Dir)
		}
	}
	return out
}

// Writer returns who writes d, 0 for a directory not in the layout.
func (d Dir) Writer() Writer {
	for _, e := range layout {
		if e.Dir == d {
			return e.Writer
		}
	}
	return 0
}

// ControllerDirs returns the directories the rollout controller writes,
// in Layout's order.
func ControllerDirs() []Dir {
	var out []Dir
	for _, d := range Dirs() {
		for _, e := range layout {
			if e.Dir == d && e.Controller {
				out = append(out, d)
				break
			}
		}
	}
	return out
}

// WrittenBy returns the directories w writes, in Layout's order.
func WrittenBy(w Writer) []Dir {
	var out []Dir
	for _, d := range Dirs() {
		if d.Writer() == w {
			out = append(out, d)
		}
	}
	return out
}
