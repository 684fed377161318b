package adminctl

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/legation-io/legation/internal/testkit/storetest"
)

// TestBadInput checks that every bad input fails with a clear error, exit
// code 1, nothing on standard output, and nothing written to etcd.
func TestBadInput(t *testing.T) {
	t.Parallel()
	e := startEnv(t, storetest.Options{})
	h := e.newHarness(t)
	applyExamples(t, h)
	rev := e.dataRevision(t)

	bad := examples + "/bad/"
	dup := writeFile(t, "dup.yaml", clusterYAML("backend-a", "1s"))
	emptyDir := t.TempDir()
	onlyComments := writeFile(t, "empty.yaml", "# nothing yet\n---\n")
	var many []string
	for i := range 200 {
		many = append(many, clusterYAML(fmt.Sprintf("c%03d", i), "1s"))
	}
	manyFile := writeFile(t, "many.yaml", docs(many...))
	badDR := `"@type": type.googleapis.com/envoy.service.discovery.v3.DiscoveryResponse
resources:
- "@type": type.googleapis.com/envoy.config.cluster.v3.Cluster
  name: a
  connect_timeout: 1s
- "@type": type.googleapis.com/envoy.config.cluster.v3.Cluster
  name: b
  connect_timeout: -2s
`

	for _, tc := range []struct {
		name  string
		args  []string
		stdin string
		// vars is the environment.
		vars map[string]string
		// raw runs args without the harness's endpoint and prefix flags.
		raw bool
		// want is the whole error message; wantSub a part of it.
		want, wantSub string
	}{
		{
			name: "bad YAML",
			args: []string{"apply", "-f", bad + "bad-yaml.yaml"},
			want: "../../../examples/bad/bad-yaml.yaml: document 1: bad YAML/JSON: yaml: line 3: did not find expected ',' or ']'",
		},
		{
			name:    "unknown @type",
			args:    []string{"apply", "-f", bad + "unknown-type.yaml"},
			wantSub: `../../../examples/bad/unknown-type.yaml: document 1 (typo-type): unknown @type "type.googleapis.com/envoy.config.cluster.v3.Clusterr"; want one of: type.googleapis.com/envoy.config.cluster.v3.Cluster, `,
		},
		{
			name: "unknown field",
			args: []string{"apply", "-f", bad + "unknown-field.yaml"},
			want: `../../../examples/bad/unknown-field.yaml: document 1 (cluster "typo-field"): proto: unknown field "connect_timeoutt"`,
		},
		{
			name: "ValidateAll: negative connect_timeout",
			args: []string{"apply", "-f", bad + "negative-timeout.yaml"},
			want: `../../../examples/bad/negative-timeout.yaml: document 1 (cluster "negative-timeout"): invalid Cluster.ConnectTimeout: value must be greater than 0s`,
		},
		{
			name: "empty name",
			args: []string{"apply", "-f", bad + "empty-name.yaml"},
			want: `../../../examples/bad/empty-name.yaml: document 1 (cluster ""): empty name: every resource needs a non-empty name`,
		},
		{
			name: "duplicate names in one file",
			args: []string{"apply", "-f", bad + "duplicate-names.yaml"},
			want: `../../../examples/bad/duplicate-names.yaml: document 2 (cluster "twin"): duplicate name: already defined at ../../../examples/bad/duplicate-names.yaml: document 1`,
		},
		{
			name: "duplicate names across files",
			args: []string{"apply", "-f", examples, "-f", dup, "--scope", "fresh"},
			want: dup + `: document 1 (cluster "backend-a"): duplicate name: already defined at ../../../examples/clusters.yaml: document 1`,
		},
		{
			name: "good files then a bad one: nothing written",
			args: []string{"apply", "-f", examples, "-f", bad + "negative-timeout.yaml", "--scope", "fresh"},
			want: `../../../examples/bad/negative-timeout.yaml: document 1 (cluster "negative-timeout"): invalid Cluster.ConnectTimeout: value must be greater than 0s`,
		},
		{
			name:  "bad document on stdin",
			args:  []string{"apply", "-f", "-"},
			stdin: "name: x\n",
			want:  `-: document 1 (x): missing "@type" (e.g. "@type": type.googleapis.com/envoy.config.cluster.v3.Cluster)`,
		},
		{
			name:  "bad resource in a DiscoveryResponse",
			args:  []string{"apply", "-f", "-"},
			stdin: badDR,
			want:  `-: document 1, resource 2 (cluster "b"): invalid Cluster.ConnectTimeout: value must be greater than 0s`,
		},
		{
			name: "router filter not last, inside typed_config",
			args: []string{"apply", "-f", "-"},
			stdin: `"@type": type.googleapis.com/envoy.config.listener.v3.Listener
name: l
api_listener:
  api_listener:
    "@type": type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager
    stat_prefix: l
    rds: {route_config_name: r, config_source: {ads: {}}}
    http_filters:
    - {name: envoy.filters.http.router, typed_config: {"@type": type.googleapis.com/envoy.extensions.filters.http.router.v3.Router}}
    - {name: envoy.filters.http.fault, typed_config: {"@type": type.googleapis.com/envoy.extensions.filters.http.fault.v3.HTTPFault}}
`,
			want: `-: document 1 (listener "l"): api_listener.api_listener(envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager).http_filters[0]: the router filter (type.googleapis.com/envoy.extensions.filters.http.router.v3.Router) must be the last HTTP filter, not 1 of 2`,
		},
		{
			name:  "stdin twice",
			args:  []string{"apply", "-f", "-", "-f", "-"},
			stdin: clusterYAML("x", "1s"),
			want:  "-f -: standard input can be read only once",
		},
		{
			name:    "over etcd's --max-txn-ops",
			args:    []string{"apply", "-f", manyFile},
			wantSub: "beyond etcd's transaction limits: the apply needs 203 operations in one transaction (200 writes, its scope's apply marker, 2 for its history), more than etcd's --max-txn-ops (128): use --chunked to split it",
		},
		{
			name:    "over etcd's --max-request-bytes",
			args:    []string{"apply", "-f", examples, "--scope", "fresh", "--max-request-bytes", "2048"},
			wantSub: "more than etcd's --max-request-bytes (2048): use --chunked to split it",
		},
		{
			name:    "unreachable etcd",
			args:    []string{"--etcd-endpoints", "127.0.0.1:1", "get", "cluster"},
			raw:     true,
			wantSub: "etcd at 127.0.0.1:1 is unreachable (after 3s): ",
		},
		{
			name:    "unreachable etcd from the environment",
			args:    []string{"apply", "-f", examples, "--dial-timeout", "1s"},
			raw:     true,
			vars:    map[string]string{"LEGATION_ETCD_ENDPOINTS": "127.0.0.1:1"},
			wantSub: "etcd at 127.0.0.1:1 is unreachable (after 1s): ",
		},
		{
			name: "TLS flags with an http:// endpoint",
			args: []string{"--etcd-endpoints", "http://127.0.0.1:1", "--etcd-cert", "c.pem", "--etcd-key", "k.pem", "get", "cluster"},
			raw:  true,
			want: `--etcd-cert, --etcd-key (TLS) with --etcd-endpoints "http://127.0.0.1:1", which is http:// (plain text): use https:// or host:port`,
		},
		{
			name: "http:// and https:// endpoints",
			args: []string{"--etcd-endpoints", "http://127.0.0.1:1,https://127.0.0.1:2", "get", "cluster"},
			raw:  true,
			want: `--etcd-endpoints: "http://127.0.0.1:1" is http:// (plain text) and "https://127.0.0.1:2" is https:// (TLS): all must be one or the other`,
		},
		{
			name:    "password from the environment without a username",
			args:    []string{"get", "cluster"},
			vars:    map[string]string{"LEGATION_ETCD_PASSWORD": "hunter2"},
			wantSub: "a password (LEGATION_ETCD_PASSWORD or --etcd-password-file) without --etcd-username",
		},
		{
			name: "username without a password",
			args: []string{"get", "cluster", "--etcd-username", "admin"},
			want: "--etcd-username without a password (LEGATION_ETCD_PASSWORD or --etcd-password-file)",
		},
		{
			// It would show in the process list: refused, and not repeated.
			name:    "password on the command line",
			args:    []string{"get", "cluster", "--etcd-username", "admin", "--etcd-password", "hunter2"},
			wantSub: "--etcd-password: refused: a password on the command line shows in the process list and shell history; set LEGATION_ETCD_PASSWORD or --etcd-password-file",
		},
		{
			name:    "password over plain text",
			args:    []string{"get", "cluster", "--etcd-username", "admin"},
			vars:    map[string]string{"LEGATION_ETCD_PASSWORD": "hunter2"},
			wantSub: "a password (--etcd-username) over plain text",
		},
		{
			name: "missing CA file",
			args: []string{"get", "cluster", "--etcd-cacert", "/no/such/ca.pem"},
			want: "--etcd-cacert /no/such/ca.pem: no such file",
		},
		{
			name:    "--timeout ends the work",
			args:    []string{"get", "cluster", "--timeout", "1ns"},
			wantSub: "--timeout 1ns expired (raise it, or give 0 for no bound)",
		},
		{
			name: "bad -o",
			args: []string{"get", "cluster", "-o", "xml"},
			want: `-o/--output "xml": want one of table, yaml, json`,
		},
		{
			name: "bad output from the environment",
			args: []string{"get", "cluster"},
			vars: map[string]string{"LEGATION_OUTPUT": "wide"},
			want: `-o/--output "wide": want one of table, yaml, json`,
		},
		{
			name: "bad duration from the environment",
			args: []string{"get", "cluster"},
			vars: map[string]string{"LEGATION_DIAL_TIMEOUT": "soon"},
			want: `environment LEGATION_DIAL_TIMEOUT="soon": invalid argument "soon" for "--dial-timeout" flag: time: invalid duration "soon"`,
		},
		{
			name: "bad --etcd-prefix",
			args: []string{"get", "cluster", "--etcd-prefix", "legation"},
			want: `--etcd-prefix "legation": must start and end with '/'`,
		},
		{
			name: "bad --scope in apply",
			args: []string{"apply", "-f", examples, "--scope", "a/b"},
			want: `--scope: scope "a/b" holds '/': scopes may not hold '/', spaces or control characters`,
		},
		{
			name: "bad --scope in get",
			args: []string{"get", "cluster", "--scope", "a b"},
			want: `--scope: scope "a b" holds ' ': scopes may not hold '/', spaces or control characters`,
		},
		{
			name: "unknown type in get",
			args: []string{"get", "clusterz"},
			want: `unknown resource type "clusterz" (known: cluster, endpoint, extension-config, lb-endpoint, listener, route, runtime, scoped-route, secret, virtual-host)`,
		},
		{
			name:    "unknown type in delete",
			args:    []string{"delete", "pods", "x"},
			wantSub: `unknown resource type "pods"`,
		},
		{
			name:    "get of a missing name",
			args:    []string{"get", "cluster", "nope", "--scope", "default"},
			wantSub: `cluster "nope" not found in scope "default" at revision `,
		},
		{
			name: "delete of a missing name deletes nothing",
			args: []string{"delete", "cluster", "backend-a", "nope"},
			// The delete's lock moved the revision.
			wantSub: `cluster "nope" not found in scope "default" at revision `,
		},
		{
			name: "delete of a name twice",
			args: []string{"delete", "cluster", "backend-a", "backend-a"},
			want: `cluster "backend-a" is named twice`,
		},
		{
			name: "ttl below a second",
			args: []string{"apply", "-f", examples, "--ttl", "10ms"},
			want: "--ttl 10ms: must be at least 1s (0: no TTL)",
		},
		{
			name: "no -f",
			args: []string{"apply"},
			want: "no input: give -f FILE, -f DIR or -f - (standard input)",
		},
		{
			name: "missing file",
			args: []string{"apply", "-f", "nope.yaml"},
			want: "-f nope.yaml: no such file or directory",
		},
		{
			name: "directory without resource files",
			args: []string{"apply", "-f", emptyDir},
			want: emptyDir + ": no *.yaml, *.yml or *.json files in the directory",
		},
		{
			name: "prune with no resources",
			args: []string{"apply", "-f", onlyComments, "--prune"},
			want: "no resources in " + onlyComments + `: refusing to --prune, which would delete every resource of scope "default" (use delete for that)`,
		},
		{
			name: "diff of a bad revision",
			args: []string{"diff", "abc"},
			want: `"abc": neither a revision nor an apply id of the history (see xdsadmin history)`,
		},
		{
			name: "diff of revision 0",
			args: []string{"diff", "0"},
			want: `revision "0": want a positive integer`,
		},
		{
			name: "diff backwards",
			args: []string{"diff", "5", "3"},
			want: "revision 3 is before 5: give the older one first",
		},
		{
			name:    "diff of a future revision",
			args:    []string{"diff", "1", "999999"},
			wantSub: "revision 999999 is newer than etcd's current revision ",
		},
		{
			name:    "get at a future revision",
			args:    []string{"get", "cluster", "--revision", "999999"},
			wantSub: "revision is newer than etcd's current one",
		},
		{
			name: "unknown flag",
			args: []string{"apply", "--nope"},
			want: "unknown flag: --nope\nRun 'xdsadmin apply --help' for usage",
		},
		{
			name: "missing arguments",
			args: []string{"delete", "cluster"},
			want: "requires at least 2 arg(s), only received 1\nRun 'xdsadmin delete --help' for usage",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), defaultTestTimeout)
			defer cancel()
			h.vars = tc.vars
			if h.vars == nil {
				h.vars = map[string]string{}
			}
			start := time.Now()
			var r result
			if tc.raw {
				r = h.runRaw(ctx, tc.stdin, tc.args...)
			} else {
				r = h.runIn(ctx, tc.stdin, tc.args...)
			}
			if elapsed := time.Since(start); elapsed > 8*time.Second {
				t.Errorf("took %s, want a quick failure", elapsed)
			}
			msg, ok := strings.CutPrefix(r.stderr, "xdsadmin: ")
			// protobuf puts a space or, at random, a no-break space after
			// "proto:" so that nobody relies on its messages.
			msg = strings.ReplaceAll(strings.TrimSuffix(msg, "\n"), "\u00a0", " ")
			switch code := wantCode(tc.want + tc.wantSub); {
			case r.code != code || !ok || r.stdout != "":
				t.Errorf("got %s\nwant exit %d, no output and an error", r, code)
			case tc.want != "" && msg != tc.want:
				t.Errorf("error:\n%s\nwant:\n%s", msg, tc.want)
			case tc.wantSub != "" && !strings.Contains(msg, tc.wantSub):
				t.Errorf("error:\n%s\nwant it to hold:\n%s", msg, tc.wantSub)
			case strings.Contains(r.stderr, "hunter2"):
				t.Errorf("error:\n%s\nshows the password", msg)
			}
			if now := e.dataRevision(t); now != rev {
				t.Errorf("a resource was written: etcd's data revision moved from %d to %d", rev, now)
			}
		})
	}
}

// TestLimits runs against an etcd that allows 8 operations per
// transaction.
func TestLimits(t *testing.T) {
	t.Parallel()
	e := startEnv(t, storetest.Options{MaxTxnOps: 8})
	// 6 clusters, 6 endpoints and a route: 13 operations.
	var ds []string
	for i := range 6 {
		ds = append(ds, clusterYAML(fmt.Sprintf("c%d", i), "1s"), endpointYAML(fmt.Sprintf("c%d", i), 8000+i))
	}
	ds = append(ds, `"@type": type.googleapis.com/envoy.config.route.v3.RouteConfiguration
name: r
virtual_hosts:
- name: all
  domains: ["*"]
  routes:
  - match: {prefix: /}
    route: {cluster: c0}
`)
	file := writeFile(t, "all.yaml", docs(ds...))

	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{
			name: "xdsadmin knows the limit",
			args: []string{"apply", "-f", file, "--max-txn-ops", "8"},
			want: "store: beyond etcd's transaction limits: the apply needs 16 operations in one transaction (13 writes, its scope's apply marker, 2 for its history), more than etcd's --max-txn-ops (8): use --chunked to split it (clients may then see it in parts), or raise --max-txn-ops on every etcd member and pass the same value to xdsadmin --max-txn-ops",
		},
		{
			name: "etcd refuses",
			args: []string{"apply", "-f", file},
			want: "etcd refused more operations than its --max-txn-ops allows (xdsadmin assumed 128): use --chunked, or give the server's value with --max-txn-ops",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := e.newHarness(t)
			rev := e.dataRevision(t)
			r := h.run(tc.args...)
			if r.code != 1 || !strings.Contains(r.stderr, tc.want) || r.stdout != "" {
				t.Errorf("got %s\nwant exit 1 and an error holding %q", r, tc.want)
			}
			if now := e.dataRevision(t); now != rev {
				t.Errorf("a resource was written: etcd's data revision moved from %d to %d", rev, now)
			}
		})
	}

	t.Run("dry run says the apply would fail", func(t *testing.T) {
		h := e.newHarness(t)
		r := h.run("apply", "-f", file, "--max-txn-ops", "8", "--dry-run")
		want := "(dry run) the apply would fail: store: beyond etcd's transaction limits: the apply needs 16 operations in one transaction (13 writes, its scope's apply marker, 2 for its history), more than etcd's --max-txn-ops (8): use --chunked"
		if r.code != 1 || !strings.Contains(r.stderr, want) || !strings.Contains(r.stdout, "(dry run) would be 13 created") {
			t.Errorf("got %s\nwant the plan and an error holding %q", r, want)
		}
		if r := h.run("apply", "-f", file, "--max-txn-ops", "8", "--dry-run", "--chunked"); r.code != 0 {
			t.Errorf("chunked dry run: %s", r)
		}
	})

	t.Run("chunked splits in make-before-break order", func(t *testing.T) {
		h := e.newHarness(t)
		from := e.revision(t)
		var out string
		lines := watchLines(t, h, 13, func() {
			out = h.mustRun("apply", "-f", file, "--max-txn-ops", "8", "--chunked")
		}, "--revision", fmt.Sprint(from))
		// 5 writes a transaction: 8 operations less the apply marker and
		// the history's 2.
		want := fmt.Sprintf("13 created, 0 changed, 0 unchanged, 0 deleted at revision %d (in 3 transactions, at revisions %d, %d, %d)\n", from+lockWrites+3, from+lockWrites+1, from+lockWrites+2, from+lockWrites+3)
		if !strings.HasSuffix(out, want) {
			t.Errorf("chunked apply output:\n%s\nwant it to end with %q", out, want)
		}
		assertMakeBeforeBreak(t, lines)

		// Changing the clusters and pruning the rest: changes first, then
		// the deletions, the route before the endpoints it leads to.
		from = e.revision(t)
		var cs []string
		for i := range 6 {
			cs = append(cs, clusterYAML(fmt.Sprintf("c%d", i), "2s"))
		}
		lines = watchLines(t, h, 13, func() {
			h.mustRun("apply", "-f", writeFile(t, "clusters.yaml", docs(cs...)), "--prune", "--prune-types", "cluster,endpoint,route", "--chunked", "--max-txn-ops", "8")
		}, "--revision", fmt.Sprint(from))
		assertMakeBeforeBreak(t, lines)
		if got := len(h.list()); got != 6 {
			t.Errorf("after the pruning apply: %d resources, want 6", got)
		}
	})
}

// assertMakeBeforeBreak checks that lines, in order, write clusters, then
// endpoints, then routes, then delete routes, then endpoints, and that
// more than one revision was used.
func assertMakeBeforeBreak(t *testing.T, lines []watchLine) {
	t.Helper()
	rank := map[string]int{
		"cluster": 0, "endpoint": 1, "listener": 2, "route": 3,
		"deleted listener": 10, "deleted route": 11, "deleted cluster": 12, "deleted endpoint": 13,
	}
	revs := map[int64]bool{}
	last, lastRev := -1, int64(0)
	for _, l := range lines {
		k := l.Type
		if l.Action == "deleted" {
			k = "deleted " + l.Type
		}
		r := rank[k]
		if r < last || l.Revision < lastRev {
			t.Errorf("%s %s %s at revision %d comes after rank %d at revision %d: not make-before-break", l.Action, l.Type, l.Name, l.Revision, last, lastRev)
		}
		last, lastRev = r, l.Revision
		revs[l.Revision] = true
	}
	if len(revs) < 2 {
		t.Errorf("changes in %d revisions, want a split", len(revs))
	}
}

// TestDirFiles checks that a directory means its resource files only,
// sorted, not recursive.
func TestDirFiles(t *testing.T) {
	dir := t.TempDir()
	for _, n := range []string{"b.yaml", "a.json", "c.yml", "d.txt", "E.YAML"} {
		writeFileAt(t, filepath.Join(dir, n), "")
	}
	writeFileAt(t, filepath.Join(dir, "sub", "x.yaml"), "")
	got, err := dirFiles(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, p := range got {
		names = append(names, filepath.Base(p))
	}
	if want := "E.YAML a.json b.yaml c.yml"; strings.Join(names, " ") != want {
		t.Errorf("dirFiles = %q, want %q", names, want)
	}
}
