package adminctl

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/legation-io/legation/internal/admin/fsexport"
	"github.com/legation-io/legation/internal/state/lease"
	"github.com/legation-io/legation/internal/state/resource"
	"github.com/legation-io/legation/internal/state/store"
	"github.com/legation-io/legation/internal/testkit/storetest"
	"github.com/legation-io/legation/internal/testkit/testbase"
	"github.com/legation-io/legation/internal/testkit/xdstest"
	"github.com/legation-io/legation/internal/xds/grpcapi"
	"github.com/legation-io/legation/internal/xds/sotw"
	"github.com/legation-io/legation/internal/xds/xdsstream"
	legationv1 "github.com/legation-io/legation/proto/legation/v1"
)

// replica is a real SotW server (with TTLs on the wire) over a real view
// of a real embedded etcd, and an xdsadmin harness on the same etcd.
type replica struct {
	*xdstest.Env
	h    *harness
	addr string
}

const exportPrefix = "/export/"

func startReplica(t *testing.T) *replica {
	t.Helper()
	xe := xdstest.NewEnv(t, xdstest.Options{Prefix: exportPrefix})
	leases, err := lease.New(lease.Config{Client: xe.Client, Prefix: exportPrefix})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); leases.Run(ctx) }() //nolint:errcheck // nil on cancel
	t.Cleanup(func() { cancel(); <-done })
	srv, err := sotw.New(sotw.Config{Config: xdsstream.Config{Source: xe.View, Leases: leases, Registerer: prometheus.NewRegistry(), CatchupTimeout: time.Second}})
	if err != nil {
		t.Fatal(err)
	}
	g := grpc.NewServer(grpcapi.ServerOptions()...)
	grpcapi.Register(g, grpcapi.Services{SotW: srv})
	r := &replica{Env: xe, addr: xdstest.Serve(t, g)}
	r.h = &harness{t: t, env: &env{etcd: xe.Etcd, client: xe.Client}, prefix: exportPrefix, vars: map[string]string{}}
	return r
}

// exportNode is the node of the tests: cluster "edge" is its group under
// the replicas' default --group-by cluster; it reads TTLs in SotW.
func exportNode() *corev3.Node {
	n := xdstest.Node("envoy-1", "edge")
	n.ClientFeatures = []string{lease.FeatureTTL, lease.FeatureResourceInSotW}
	return n
}

// seed writes, in the default scope, clusters a and b with endpoints, a
// listener and its route, and a TTL'd runtime layer; in group edge, an
// override of cluster a, endpoints only edge has and a TTL'd route; in
// group other, a cluster the node must not see. It returns the revision.
func (r *replica) seed(t *testing.T) int64 {
	t.Helper()
	def, edge := store.DefaultScope, "edge"
	r.Apply(t, []store.Put{
		xdstest.Put(t, resource.Cluster, def, xdstest.Cluster("a", 1000)),
		xdstest.Put(t, resource.Cluster, def, xdstest.Cluster("b", 1000)),
		xdstest.Put(t, resource.Endpoint, def, xdstest.Endpoints("a", 8001)),
		xdstest.Put(t, resource.Endpoint, def, xdstest.Endpoints("b", 8002)),
		xdstest.Put(t, resource.Listener, def, xdstest.APIListener(t, "api", "r1", true)),
		xdstest.Put(t, resource.Route, def, xdstest.Route("r1", "*", "a")),
		xdstest.Put(t, resource.Cluster, edge, xdstest.Cluster("a", 2500)),
		xdstest.Put(t, resource.Endpoint, edge, xdstest.Endpoints("edge-only", 9001)),
		xdstest.Put(t, resource.Cluster, "other", xdstest.Cluster("hidden", 1000)),
	})
	r.ApplyRequest(t, store.PlanRequest{TTL: time.Hour, Puts: []store.Put{
		xdstest.Put(t, resource.Runtime, def, xdstest.Runtime("layer", "k", "v")),
	}})
	return r.ApplyRequest(t, store.PlanRequest{TTL: time.Hour, Puts: []store.Put{
		xdstest.Put(t, resource.Route, edge, xdstest.Route("r-ttl", "ttl.example", "b")),
	}}).Revision
}

// seededTypes are the types seed writes something the node sees of.
var seededTypes = []*resource.Type{resource.Cluster, resource.Endpoint, resource.Listener, resource.Route, resource.Runtime}

// sotw opens an ADS stream as node, subscribes to everything of types
// ("*" for the types that are not wildcard) and returns the first
// response of each, with TTL wrappers removed, and how many resources came
// wrapped.
func (r *replica) sotw(t *testing.T, node *corev3.Node, types []*resource.Type) (map[*resource.Type]*discoveryv3.DiscoveryResponse, int) {
	t.Helper()
	st := xdstest.OpenSotW(t, xdstest.Dial(t, r.addr))
	defer st.Cancel()
	for i, typ := range types {
		req := &discoveryv3.DiscoveryRequest{TypeUrl: typ.URL}
		if i == 0 {
			req.Node = node
		}
		if !typ.Wildcard {
			req.ResourceNames = []string{"*"}
		}
		st.Send(req)
	}
	got := map[*resource.Type]*discoveryv3.DiscoveryResponse{}
	wrapped := 0
	for len(got) < len(types) {
		resp := st.Expect()
		typ, ok := resource.ByURL(resp.GetTypeUrl())
		if !ok {
			t.Fatalf("response of unknown type %s", resp.GetTypeUrl())
		}
		if got[typ] != nil {
			continue
		}
		var n int
		resp, n = unwrapTTL(t, resp)
		wrapped += n
		got[typ] = resp
	}
	return got, wrapped
}

// unwrapTTL returns resp with each discovery.v3.Resource wrapper replaced
// by the resource it carries, and how many there were.
func unwrapTTL(t *testing.T, resp *discoveryv3.DiscoveryResponse) (*discoveryv3.DiscoveryResponse, int) {
	t.Helper()
	out := &discoveryv3.DiscoveryResponse{VersionInfo: resp.GetVersionInfo(), TypeUrl: resp.GetTypeUrl()}
	n := 0
	for _, a := range resp.GetResources() {
		if a.GetTypeUrl() == "type.googleapis.com/envoy.service.discovery.v3.Resource" {
			var w discoveryv3.Resource
			if err := a.UnmarshalTo(&w); err != nil {
				t.Fatal(err)
			}
			if w.GetTtl() == nil {
				t.Errorf("wrapped resource %s without a TTL", w.GetName())
			}
			a, n = w.GetResource(), n+1
		}
		out.Resources = append(out.Resources, a)
	}
	return out, n
}

// readExport decodes the file of type typ in dir.
func readExport(t *testing.T, dir string, typ *resource.Type, f fsexport.Format) *discoveryv3.DiscoveryResponse {
	t.Helper()
	return readFile(t, filepath.Join(dir, fsexport.FileName(typ, f)), f)
}

// sameResponse fails unless file holds, resource for resource, what the
// stream was sent, at the same version.
func sameResponse(t *testing.T, what string, file, sent *discoveryv3.DiscoveryResponse) {
	t.Helper()
	if file.GetVersionInfo() != sent.GetVersionInfo() || file.GetTypeUrl() != sent.GetTypeUrl() {
		t.Errorf("%s: file has version %q type %q, stream %q type %q", what, file.GetVersionInfo(), file.GetTypeUrl(), sent.GetVersionInfo(), sent.GetTypeUrl())
	}
	if len(file.GetResources()) != len(sent.GetResources()) {
		t.Fatalf("%s: file has %d resources, stream %d", what, len(file.GetResources()), len(sent.GetResources()))
	}
	for i := range file.GetResources() {
		// Both are Any: compare what they hold, as the JSON and YAML
		// round trip may re-encode the bytes.
		fm, err := file.GetResources()[i].UnmarshalNew()
		if err != nil {
			t.Fatal(err)
		}
		sm, err := sent.GetResources()[i].UnmarshalNew()
		if err != nil {
			t.Fatal(err)
		}
		if !proto.Equal(fm, sm) {
			t.Errorf("%s: resource %d differs:\nfile   %v\nstream %v", what, i, fm, sm)
		}
	}
}

// exportedFiles lists the files under dir, relative, sorted; it fails on
// a temporary file left behind.
func exportedFiles(t *testing.T, dir string) []string {
	t.Helper()
	var out []string
	err := filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		if strings.Contains(rel, ".tmp-") {
			t.Errorf("temporary file %s left", rel)
		}
		out = append(out, rel)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	sort.Strings(out)
	return out
}

// checkEach fails unless each resource of typeFile, a type that is not
// wildcard, also has its own file holding it alone at the same version.
func checkEach(t *testing.T, dir string, typ *resource.Type, f fsexport.Format, typeFile *discoveryv3.DiscoveryResponse) {
	t.Helper()
	for i, name := range resourceNames(t, typeFile) {
		one := readFile(t, filepath.Join(dir, fsexport.ResourceDir(typ), fsexport.ResourceFileName(name, f)), f)
		want := &discoveryv3.DiscoveryResponse{VersionInfo: typeFile.GetVersionInfo(), TypeUrl: typ.URL, Resources: typeFile.GetResources()[i : i+1]}
		sameResponse(t, typ.Name+" "+name, one, want)
	}
}

func readFile(t *testing.T, path string, f fsexport.Format) *discoveryv3.DiscoveryResponse {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := fsexport.Decode(b, f)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return resp
}

func resourceNames(t *testing.T, resp *discoveryv3.DiscoveryResponse) []string {
	t.Helper()
	return xdstest.Names(t, resp)
}

func TestExportEquivalence(t *testing.T) {
	r := startReplica(t)
	rev := r.seed(t)
	sent, wrapped := r.sotw(t, exportNode(), seededTypes)
	if wrapped != 2 {
		t.Fatalf("the stream got %d TTL'd resources wrapped, want 2 (runtime layer, route r-ttl)", wrapped)
	}
	for _, f := range fsexport.Formats {
		t.Run(string(f), func(t *testing.T) {
			// A directory that does not exist yet, nor its parent:
			// export makes both.
			dir := filepath.Join(t.TempDir(), "xds", "edge")
			out := r.h.mustRun("export", "--node", "envoy-1", "--cluster", "edge", "--dir", dir, "--format", string(f))
			if !strings.Contains(out, filepath.Join(dir, "cds."+string(f))) {
				t.Errorf("output does not name cds.%s:\n%s", f, out)
			}
			for _, typ := range resource.SotW() {
				file := readExport(t, dir, typ, f)
				if file.GetTypeUrl() != typ.URL || file.GetVersionInfo() != xdstest.Version(rev) {
					t.Errorf("%s: type %q version %q, want %q %q", typ.Name, file.GetTypeUrl(), file.GetVersionInfo(), typ.URL, xdstest.Version(rev))
				}
				if resp, ok := sent[typ]; ok {
					sameResponse(t, typ.Name, file, resp)
				} else if len(file.GetResources()) != 0 {
					t.Errorf("%s: the node sees none, the file holds %d", typ.Name, len(file.GetResources()))
				}
				if !typ.Wildcard {
					checkEach(t, dir, typ, f, file)
				}
			}
			// What the equivalence means here: edge's cluster a
			// overrides the default one, edge's resources are in, other
			// groups' are not, TTL'd ones are plain.
			cds := readExport(t, dir, resource.Cluster, f)
			if got := strings.Join(resourceNames(t, cds), ","); got != "a,b" {
				t.Errorf("clusters %s, want a,b", got)
			}
			a, _ := cds.GetResources()[0].UnmarshalNew()
			if want := xdstest.Cluster("a", 2500); !proto.Equal(a, want) {
				t.Errorf("cluster a is not edge's override: %v", a)
			}
			if got := strings.Join(resourceNames(t, readExport(t, dir, resource.Endpoint, f)), ","); got != "a,b,edge-only" {
				t.Errorf("endpoints %s, want a,b,edge-only", got)
			}
			if got := strings.Join(resourceNames(t, readExport(t, dir, resource.Route, f)), ","); got != "r-ttl,r1" {
				t.Errorf("routes %s, want r-ttl,r1", got)
			}
			ext := "." + string(f)
			want := []string{"cds" + ext, "ecds" + ext, "eds" + ext, "eds/a" + ext, "eds/b" + ext, "eds/edge-only" + ext,
				"lds" + ext, "rds" + ext, "rds/r-ttl" + ext, "rds/r1" + ext, "rtds" + ext, "rtds/layer" + ext,
				"sds" + ext, "srds" + ext, "vhds" + ext}
			sort.Strings(want)
			if got := exportedFiles(t, dir); strings.Join(got, " ") != strings.Join(want, " ") {
				t.Errorf("files:\n got %v\nwant %v", got, want)
			}
		})
	}

	t.Run("group flag", func(t *testing.T) {
		// --group edge is the same as a node of cluster edge.
		dir := t.TempDir()
		r.h.mustRun("export", "--node", "envoy-1", "--group", "edge", "--dir", dir)
		sameResponse(t, "cds", readExport(t, dir, resource.Cluster, fsexport.YAML), sent[resource.Cluster])
	})
	t.Run("group by metadata", func(t *testing.T) {
		dir := t.TempDir()
		r.h.mustRun("export", "--node", "envoy-1", "--group-by", "metadata:team", "--metadata", "team=edge", "--dir", dir, "--format", "json")
		sameResponse(t, "eds", readExport(t, dir, resource.Endpoint, fsexport.JSON), sent[resource.Endpoint])
	})
	t.Run("no group", func(t *testing.T) {
		// A node with no cluster sees the default scope only, as it does
		// on a replica.
		node := xdstest.Node("plain", "")
		plain, _ := r.sotw(t, node, seededTypes)
		dir := t.TempDir()
		res := r.h.run("export", "--node", "plain", "--dir", dir)
		if res.code != 0 || !strings.Contains(res.stderr, "default scope only") {
			t.Fatalf("export: %s", res)
		}
		for _, typ := range seededTypes {
			sameResponse(t, typ.Name, readExport(t, dir, typ, fsexport.YAML), plain[typ])
		}
	})
}

// fileState is what a test knows of a file: its inode, mtime and bytes.
type fileState struct {
	ino   uint64
	mtime time.Time
	data  string
}

func statFile(t *testing.T, path string) fileState {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return fileState{ino: fi.Sys().(*syscall.Stat_t).Ino, mtime: fi.ModTime(), data: string(b)}
}

func TestExportWatch(t *testing.T) {
	r := startReplica(t)
	r.seed(t)
	dir := t.TempDir()
	// Left by an earlier export: the per-resource file of an endpoint set
	// that is gone is removed; a file in no export format is not.
	writeFileAt(t, filepath.Join(dir, "eds", "stale.json"), "{}")
	writeFileAt(t, filepath.Join(dir, "eds", "README"), "mine")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var out, errOut testbase.LockedBuffer
	done := make(chan int, 1)
	go func() {
		args := []string{"--etcd-endpoints", r.Etcd.Endpoint, "--etcd-prefix", exportPrefix,
			"export", "--node", "envoy-1", "--cluster", "edge", "--dir", dir, "--format", "json", "--watch"}
		done <- run(ctx, args, strings.NewReader(""), &out, &errOut, func(string) (string, bool) { return "", false })
	}()
	path := func(typ *resource.Type) string { return filepath.Join(dir, fsexport.FileName(typ, fsexport.JSON)) }
	xdstest.WaitFor(t, "every file written", func() (bool, string) {
		for _, typ := range resource.SotW() {
			if _, err := os.Stat(path(typ)); err != nil {
				return false, err.Error()
			}
		}
		return true, ""
	})
	before := map[*resource.Type]fileState{}
	for _, typ := range resource.SotW() {
		before[typ] = statFile(t, path(typ))
	}
	each := func(name string) string { return filepath.Join(dir, "eds", name+".json") }
	eachBefore := map[string]fileState{}
	for _, n := range []string{"a", "b", "edge-only"} {
		eachBefore[n] = statFile(t, each(n))
	}
	if _, err := os.Stat(each("stale")); err == nil {
		t.Errorf("eds/stale.json, left by an earlier export, was not removed")
	}
	if _, err := os.Stat(filepath.Join(dir, "eds", "README")); err != nil {
		t.Errorf("eds/README, no export's, was removed: %v", err)
	}

	// A reader that keeps reading the endpoints file, as Envoy would:
	// every read must decode whole.
	readCtx, stopReading := context.WithCancel(context.Background())
	var readWG sync.WaitGroup
	var reads, bad int
	var badErr error
	readWG.Add(1)
	go func() {
		defer readWG.Done()
		for readCtx.Err() == nil {
			b, err := os.ReadFile(path(resource.Endpoint))
			if err == nil {
				_, err = fsexport.Decode(b, fsexport.JSON)
			}
			reads++
			if err != nil {
				bad, badErr = bad+1, err
			}
		}
	}()

	// A change the node cannot see (another group's) and then one to its
	// endpoints: only eds is rewritten.
	r.Apply(t, []store.Put{xdstest.Put(t, resource.Endpoint, "other", xdstest.Endpoints("a", 7777))})
	rev := r.Apply(t, []store.Put{xdstest.Put(t, resource.Endpoint, store.DefaultScope, xdstest.Endpoints("a", 8101))})
	xdstest.WaitFor(t, "eds rewritten", func() (bool, string) {
		b, err := os.ReadFile(path(resource.Endpoint))
		if err != nil {
			return false, err.Error()
		}
		resp, err := fsexport.Decode(b, fsexport.JSON)
		if err != nil {
			return false, err.Error()
		}
		return resp.GetVersionInfo() == xdstest.Version(rev), resp.GetVersionInfo()
	})
	stopReading()
	readWG.Wait()
	if bad > 0 {
		t.Errorf("%d of %d reads of eds.json did not decode: %v", bad, reads, badErr)
	}
	after := statFile(t, path(resource.Endpoint))
	if after.ino == before[resource.Endpoint].ino {
		t.Errorf("eds.json kept its inode: rewritten in place, not renamed over")
	}
	for _, typ := range resource.SotW() {
		if typ == resource.Endpoint {
			continue
		}
		if now := statFile(t, path(typ)); now != before[typ] {
			t.Errorf("%s was rewritten (inode %d -> %d, mtime %s -> %s), though its resources did not change", fsexport.FileName(typ, fsexport.JSON), before[typ].ino, now.ino, before[typ].mtime, now.mtime)
		}
	}
	if statFile(t, each("a")).ino == eachBefore["a"].ino {
		t.Errorf("eds/a.json not rewritten")
	}
	for _, n := range []string{"b", "edge-only"} {
		if statFile(t, each(n)) != eachBefore[n] {
			t.Errorf("eds/%s.json rewritten, though it did not change", n)
		}
	}
	// The new content is what a stream gets at the new revision.
	sent, _ := r.sotw(t, exportNode(), []*resource.Type{resource.Endpoint})
	sameResponse(t, "eds after the change", readExport(t, dir, resource.Endpoint, fsexport.JSON), sent[resource.Endpoint])

	// A deletion: cds is rewritten without the cluster, the rest stays.
	cdsBefore, edsBefore := statFile(t, path(resource.Cluster)), after
	rev = r.Apply(t, nil, xdstest.Key(resource.Cluster, "b"))
	xdstest.WaitFor(t, "cds rewritten", func() (bool, string) {
		resp := readExport(t, dir, resource.Cluster, fsexport.JSON)
		return resp.GetVersionInfo() == xdstest.Version(rev), resp.GetVersionInfo()
	})
	if got := strings.Join(resourceNames(t, readExport(t, dir, resource.Cluster, fsexport.JSON)), ","); got != "a" {
		t.Errorf("clusters after deleting b: %s, want a", got)
	}
	if statFile(t, path(resource.Cluster)).ino == cdsBefore.ino {
		t.Errorf("cds.json kept its inode")
	}
	if statFile(t, path(resource.Endpoint)) != edsBefore {
		t.Errorf("eds.json rewritten by a change to clusters")
	}

	// An endpoint set deleted: its own file goes, before eds.json is
	// rewritten.
	rev = r.Apply(t, nil, xdstest.Key(resource.Endpoint, "b"))
	xdstest.WaitFor(t, "eds.json rewritten", func() (bool, string) {
		resp := readExport(t, dir, resource.Endpoint, fsexport.JSON)
		return resp.GetVersionInfo() == xdstest.Version(rev), resp.GetVersionInfo()
	})
	if _, err := os.Stat(each("b")); !os.IsNotExist(err) {
		t.Errorf("eds/b.json still there once eds.json is at the deletion's version: %v", err)
	}
	if got := strings.Join(resourceNames(t, readExport(t, dir, resource.Endpoint, fsexport.JSON)), ","); got != "a,edge-only" {
		t.Errorf("endpoints after deleting b: %s, want a,edge-only", got)
	}

	cancel()
	select {
	case code := <-done:
		if code != 0 {
			t.Errorf("export --watch ended with %d after Ctrl-C, want 0:\n%s", code, errOut.String())
		}
	case <-time.After(defaultTestTimeout):
		t.Fatal("export --watch did not stop when its context ended")
	}
	if !strings.Contains(out.String(), "eds.json") || !strings.Contains(out.String(), xdstest.Version(rev)) {
		t.Errorf("output does not report the rewrites:\n%s", out.String())
	}
	exportedFiles(t, dir)
}

func TestExportBadInput(t *testing.T) {
	r := startReplica(t)
	r.seed(t)
	notDir := writeFile(t, "file", "x")
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"no node", []string{"--dir", "DIR"}, "--node"},
		{"no dir", []string{"--node", "n"}, "--dir"},
		{"bad format", []string{"--node", "n", "--dir", "DIR", "--format", "xml"}, `--format: format "xml": want one of yaml, json, pb`},
		{"dir under a file", []string{"--node", "n", "--dir", filepath.Join(notDir, "sub")}, filepath.Join(notDir, "sub") + ": not a directory"},
		{"dir is a file", []string{"--node", "n", "--dir", notDir}, "is not a directory"},
		{"group and cluster", []string{"--node", "n", "--dir", "DIR", "--group", "edge", "--cluster", "edge"}, "give one or the other"},
		{"group and group-by", []string{"--node", "n", "--dir", "DIR", "--group", "edge", "--group-by", "id"}, "give one or the other"},
		{"bad group", []string{"--node", "n", "--dir", "DIR", "--group", "a/b"}, "--group: scope"},
		{"bad group-by", []string{"--node", "n", "--dir", "DIR", "--group-by", "zone"}, `--group-by "zone"`},
		{"bad metadata", []string{"--node", "n", "--dir", "DIR", "--metadata", "team"}, "--metadata"},
		{"unknown flag", []string{"--node", "n", "--dir", "DIR", "--nodes", "x"}, "unknown flag: --nodes"},
		{"argument", []string{"--node", "n", "--dir", "DIR", "extra"}, "accepts 0 arg"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			args := []string{"export"}
			for _, a := range tc.args {
				args = append(args, strings.ReplaceAll(a, "DIR", dir))
			}
			res := r.h.run(args...)
			if res.code == 0 || !strings.Contains(res.stderr, tc.want) {
				t.Errorf("got %s\nwant an error holding %q", res, tc.want)
			}
			if left, _ := os.ReadDir(dir); len(left) != 0 {
				t.Errorf("%d files written", len(left))
			}
		})
	}
}

// TestExportUnencodable: a resource written to etcd by another tool with
// an Any of a type no Envoy proto defines cannot be written as JSON or
// YAML; the export fails naming it, and writes nothing.
func TestExportUnencodable(t *testing.T) {
	r := startReplica(t)
	r.seed(t)
	c := xdstest.Cluster("weird", 1000)
	c.TransportSocket = &corev3.TransportSocket{Name: "x", ConfigType: &corev3.TransportSocket_TypedConfig{
		TypedConfig: &anypb.Any{TypeUrl: "type.googleapis.com/no.such.Type"}}}
	body, err := resource.Marshal(resource.Cluster, c)
	if err != nil {
		t.Fatal(err)
	}
	val, err := proto.Marshal(&legationv1.Envelope{Body: body})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), defaultTestTimeout)
	defer cancel()
	if _, err := r.Client.Put(ctx, exportPrefix+"resources/cluster/default/weird", string(val)); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"json", "yaml"} {
		dir := t.TempDir()
		res := r.h.run("export", "--node", "n", "--dir", dir, "--format", f)
		if res.code == 0 || !strings.Contains(res.stderr, `cluster "weird" (scope default)`) || !strings.Contains(res.stderr, "no.such.Type") {
			t.Errorf("%s: got %s\nwant an error naming cluster weird and its type", f, res)

		}
		if got := exportedFiles(t, dir); len(got) != 0 {
			t.Errorf("%s: files written: %v", f, got)
		}
	}
	// Binary proto carries the Any as it is.
	dir := t.TempDir()
	r.h.mustRun("export", "--node", "n", "--dir", dir, "--format", "pb")
	if got := strings.Join(resourceNames(t, readExport(t, dir, resource.Cluster, fsexport.Proto)), ","); got != "a,b,weird" {
		t.Errorf("clusters %s, want a,b,weird", got)
	}
}

// TestExportWatchCompaction: export --watch loses etcd while changes are
// made and compacted away; when etcd is back it reloads and the files
// catch up, only those that changed rewritten.
func TestExportWatchCompaction(t *testing.T) {
	r := startReplica(t)
	r.seed(t)
	proxy := storetest.NewProxy(t, r.Etcd.Endpoint)
	dir := t.TempDir()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var out, errOut testbase.LockedBuffer
	done := make(chan int, 1)
	go func() {
		args := []string{"--etcd-endpoints", proxy.Addr, "--etcd-prefix", exportPrefix,
			"export", "--node", "envoy-1", "--cluster", "edge", "--dir", dir, "--watch"}
		done <- run(ctx, args, strings.NewReader(""), &out, &errOut, func(string) (string, bool) { return "", false })
	}()
	path := func(typ *resource.Type) string { return filepath.Join(dir, fsexport.FileName(typ, fsexport.YAML)) }
	xdstest.WaitFor(t, "every file written", func() (bool, string) {
		for _, typ := range resource.SotW() {
			if _, err := os.Stat(path(typ)); err != nil {
				return false, err.Error()
			}
		}
		return true, ""
	})
	lds := statFile(t, path(resource.Listener))

	proxy.Cut()
	r.Apply(t, []store.Put{xdstest.Put(t, resource.Endpoint, store.DefaultScope, xdstest.Endpoints("a", 8201))})
	rev := r.Apply(t, nil, xdstest.Key(resource.Route, "r1"))
	cctx, ccancel := context.WithTimeout(context.Background(), defaultTestTimeout)
	defer ccancel()
	if _, err := r.Client.Compact(cctx, rev); err != nil {
		t.Fatal(err)
	}
	proxy.Restore()

	xdstest.WaitFor(t, "eds and rds caught up", func() (bool, string) {
		eds, rds := readExport(t, dir, resource.Endpoint, fsexport.YAML), readExport(t, dir, resource.Route, fsexport.YAML)
		_, err := os.Stat(filepath.Join(dir, "rds", "r1.yaml"))
		return eds.GetVersionInfo() == xdstest.Version(rev) && rds.GetVersionInfo() == xdstest.Version(rev) && os.IsNotExist(err),
			fmt.Sprintf("eds %s rds %s rds/r1.yaml %v", eds.GetVersionInfo(), rds.GetVersionInfo(), err)
	})
	// The view's warning: the catch-up was a reload, not a watch replay.
	if !strings.Contains(errOut.String(), "compacted; reloading") {
		t.Errorf("no reload after the compaction reported:\n%s", errOut.String())
	}
	sent, _ := r.sotw(t, exportNode(), []*resource.Type{resource.Endpoint, resource.Route})
	sameResponse(t, "eds", readExport(t, dir, resource.Endpoint, fsexport.YAML), sent[resource.Endpoint])
	sameResponse(t, "rds", readExport(t, dir, resource.Route, fsexport.YAML), sent[resource.Route])
	if statFile(t, path(resource.Listener)) != lds {
		t.Errorf("lds.yaml rewritten, though listeners did not change")
	}
	cancel()
	select {
	case code := <-done:
		if code != 0 {
			t.Errorf("export --watch ended with %d:\n%s", code, errOut.String())
		}
	case <-time.After(defaultTestTimeout):
		t.Fatal("export --watch did not stop when its context ended")
	}
}
