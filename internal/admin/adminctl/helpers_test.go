package adminctl

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/legation-io/legation/internal/state/store"
	"github.com/legation-io/legation/internal/testkit/storetest"
)

const (
	// defaultTestTimeout bounds what must happen.
	defaultTestTimeout = 20 * time.Second
	// examples is the repository's examples directory.
	examples = "../../../examples"
)

// env is one embedded etcd shared by the subtests of a top-level test,
// each under a prefix of its own.
type env struct {
	etcd   *storetest.Etcd
	client *clientv3.Client
}

func startEnv(t *testing.T, opts storetest.Options) *env {
	t.Helper()
	e := storetest.Start(t, opts)
	return &env{etcd: e, client: e.Client(t)}
}

// harness runs xdsadmin commands in-process against env under one prefix.
type harness struct {
	t      *testing.T
	env    *env
	prefix string
	// vars is the environment the commands see; nothing else leaks in.
	vars map[string]string
}

var prefixSeq struct {
	sync.Mutex
	n int
}

// newHarness returns a harness with a prefix no other test uses.
func (e *env) newHarness(t *testing.T) *harness {
	prefixSeq.Lock()
	prefixSeq.n++
	n := prefixSeq.n
	prefixSeq.Unlock()
	return &harness{t: t, env: e, prefix: fmt.Sprintf("/test%d/", n), vars: map[string]string{}}
}

// result is what one command did.
type result struct {
	stdout, stderr string
	code           int
}

func (r result) String() string {
	return fmt.Sprintf("exit %d\nstdout:\n%s\nstderr:\n%s", r.code, r.stdout, r.stderr)
}

// runIn runs xdsadmin with the harness's endpoint and prefix, stdin and
// args, and ctx.
func (h *harness) runIn(ctx context.Context, stdin string, args ...string) result {
	h.t.Helper()
	full := append([]string{"--etcd-endpoints", h.env.etcd.Endpoint, "--etcd-prefix", h.prefix}, args...)
	return h.runRaw(ctx, stdin, full...)
}

// runRaw runs xdsadmin with exactly args.
func (h *harness) runRaw(ctx context.Context, stdin string, args ...string) result {
	h.t.Helper()
	var out, errOut bytes.Buffer
	lookup := func(k string) (string, bool) { v, ok := h.vars[k]; return v, ok }
	code := run(ctx, args, strings.NewReader(stdin), &out, &errOut, lookup)
	return result{stdout: out.String(), stderr: errOut.String(), code: code}
}

func (h *harness) run(args ...string) result {
	h.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), defaultTestTimeout)
	defer cancel()
	return h.runIn(ctx, "", args...)
}

func (h *harness) runStdin(stdin string, args ...string) result {
	h.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), defaultTestTimeout)
	defer cancel()
	return h.runIn(ctx, stdin, args...)
}

// mustRun runs a command that must succeed and returns its stdout.
func (h *harness) mustRun(args ...string) string {
	h.t.Helper()
	r := h.run(args...)
	if r.code != 0 {
		h.t.Fatalf("xdsadmin %s: %s", strings.Join(args, " "), r)
	}
	return r.stdout
}

// revision is etcd's current revision.
func (e *env) revision(t *testing.T) int64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), defaultTestTimeout)
	defer cancel()
	resp, err := e.client.Get(ctx, "/no-such-key")
	if err != nil {
		t.Fatalf("etcd get: %v", err)
	}
	return resp.Header.Revision
}

// lockWrites is how many revisions an apply or a delete takes before its
// plan: taking the scope's apply lock writes its holder and its mutex key.
// Releasing it deletes both: the command moves etcd by lockWrites more
// after its own.
const lockWrites = 2

// dataRevision is the newest mod_revision of a key outside the apply
// locks: what moves when a command writes resources (every write to a
// scope also puts its apply marker, deletions included), and not when it
// only takes and releases a lock.
func (e *env) dataRevision(t *testing.T) int64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), defaultTestTimeout)
	defer cancel()
	resp, err := e.client.Get(ctx, "/", clientv3.WithPrefix(), clientv3.WithKeysOnly())
	if err != nil {
		t.Fatalf("etcd get: %v", err)
	}
	var rev int64
	for _, kv := range resp.Kvs {
		if !strings.Contains(string(kv.Key), "/locks/") {
			rev = max(rev, kv.ModRevision)
		}
	}
	return rev
}

// store returns a Store on the harness's prefix, for checks.
func (h *harness) store() *store.Store {
	h.t.Helper()
	s, err := store.New(store.Config{Client: h.env.client, Prefix: h.prefix})
	if err != nil {
		h.t.Fatal(err)
	}
	return s
}

// list reads every resource under the harness's prefix.
func (h *harness) list() []*store.Resource {
	h.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), defaultTestTimeout)
	defer cancel()
	lr, err := h.store().List(ctx, store.ListOptions{})
	if err != nil {
		h.t.Fatal(err)
	}
	return lr.Resources
}

// fields splits output into lines of whitespace-separated fields, so that
// tables compare exactly but for their alignment.
func fields(s string) [][]string {
	var out [][]string
	for _, l := range strings.Split(strings.TrimRight(s, "\n"), "\n") {
		out = append(out, strings.Fields(l))
	}
	return out
}

// writeFile writes a file in a temporary directory and returns its path.
func writeFile(t *testing.T, name, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// writeFileAt writes a file at path, creating its directory.
func writeFileAt(t *testing.T, path, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

// readExample returns the content of an example file.
func readExample(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(examples, name))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// clusterYAML is a valid EDS cluster document.
func clusterYAML(name, timeout string) string {
	return fmt.Sprintf(`"@type": type.googleapis.com/envoy.config.cluster.v3.Cluster
name: %s
type: EDS
eds_cluster_config:
  eds_config:
    ads: {}
    resource_api_version: V3
  service_name: %s
connect_timeout: %s
`, name, name, timeout)
}

// endpointYAML is a valid ClusterLoadAssignment document.
func endpointYAML(name string, port int) string {
	return fmt.Sprintf(`"@type": type.googleapis.com/envoy.config.endpoint.v3.ClusterLoadAssignment
cluster_name: %s
endpoints:
- lb_endpoints:
  - endpoint:
      address:
        socket_address:
          address: 127.0.0.1
          port_value: %d
`, name, port)
}

// docs joins YAML documents.
func docs(ds ...string) string { return strings.Join(ds, "---\n") }

// wantCode is the exit code of an error message: 2 for an error in the
// command line (its message points to the help), else 1.
func wantCode(msg string) int {
	if strings.Contains(msg, "--help' for usage") {
		return exitUsage
	}
	return 1
}
