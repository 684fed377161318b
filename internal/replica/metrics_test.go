package replica_test

import (
	"bufio"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/legation-io/legation/internal/replica"
	"github.com/legation-io/legation/internal/testkit/testcerts"
)

// metricInfo is what the catalogue says of a metric: its type and label
// names (sorted).
type metricInfo struct {
	typ    string // counter, gauge, histogram, summary, untyped; "" when unknown
	labels []string
}

// recordingRegisterer registers on a registry and keeps every collector
// registered, so that a test can describe them all: a vector with no
// series yet (no limit hit, no NACK) is still a metric the code exports,
// though a scrape does not show it.
type recordingRegisterer struct {
	*prometheus.Registry
	mu         sync.Mutex
	collectors []prometheus.Collector
}

func (r *recordingRegisterer) Register(c prometheus.Collector) error {
	if err := r.Registry.Register(c); err != nil {
		return err
	}
	r.mu.Lock()
	r.collectors = append(r.collectors, c)
	r.mu.Unlock()
	return nil
}

func (r *recordingRegisterer) MustRegister(cs ...prometheus.Collector) {
	for _, c := range cs {
		if err := r.Register(c); err != nil {
			panic(err)
		}
	}
}

var descRE = regexp.MustCompile(`^Desc\{fqName: ("(?:[^"\\]|\\.)*"), help: "(?:[^"\\]|\\.)*", unit: "(?:[^"\\]|\\.)*", constLabels: \{(.*)\}, variableLabels: \{(.*)\}\}$`)

// parseDesc returns the name and label names of a metric description.
func parseDesc(t *testing.T, d *prometheus.Desc) (string, []string) {
	t.Helper()
	m := descRE.FindStringSubmatch(d.String())
	if m == nil {
		t.Fatalf("cannot parse %s", d)
	}
	name, err := strconv.Unquote(m[1])
	if err != nil {
		t.Fatalf("cannot parse the name of %s: %v", d, err)
	}
	var labels []string
	if m[2] != "" {
		for _, p := range strings.Split(m[2], ",") {
			n, _, _ := strings.Cut(p, "=")
			labels = append(labels, n)
		}
	}
	if m[3] != "" {
		for _, n := range strings.Split(m[3], ",") {
			labels = append(labels, strings.TrimSuffix(strings.TrimPrefix(n, "c("), ")"))
		}
	}
	sort.Strings(labels)
	return name, labels
}

var (
	exportedOnce sync.Once
	exportedSet  map[string]metricInfo
)

// exportedMetrics returns every metric a fully built replica exports, as
// xds-node builds it (replica.NewRegistry, then replica.New): what its
// collectors describe, and what a scrape of /metrics gathers (the types,
// and the Go and process collectors'). The replica runs in etcd mode,
// ready, with one SotW and one delta stream served, so that what is
// registered late (membership, status) is there. It is built once per
// test binary.
func exportedMetrics(t *testing.T) map[string]metricInfo {
	t.Helper()
	exportedOnce.Do(func() {
		e := newXDSEnv(t)
		reg := &recordingRegisterer{Registry: replica.NewRegistry()}
		cfg := e.config(t)
		cfg.Registerer = reg
		cfg.Gatherer = reg.Registry
		// The collector between pushes, off by default, registers the
		// legation_quiet_gc_ metrics.
		cfg.GCBetweenPushes = true
		r := start(t, cfg)
		waitReady(t, r)
		pushAndAck(t, e, r)

		out := described(t, reg)
		mfs, err := reg.Gather()
		if err != nil {
			t.Fatalf("gather: %v", err)
		}
		for _, mf := range mfs {
			info := out[mf.GetName()]
			info.typ = strings.ToLower(mf.GetType().String())
			if info.labels == nil && len(mf.GetMetric()) > 0 {
				info.labels = labelNames(mf.GetMetric()[0])
			}
			out[mf.GetName()] = info
		}
		r.stop(t)

		// What only a replica with mTLS registers (the authorization
		// rules' watcher): its collectors, described after New.
		dir := t.TempDir()
		ca, err := testcerts.NewCA(dir, "catalogue")
		if err != nil {
			t.Fatal(err)
		}
		server, err := ca.Issue(dir, "replica", testcerts.Loopback(testcerts.Options{URIs: []string{"spiffe://legation.test/replica"}}))
		if err != nil {
			t.Fatal(err)
		}
		treg := &recordingRegisterer{Registry: replica.NewRegistry()}
		tcfg := e.config(t)
		tcfg.Registerer = treg
		tcfg.TLSCertFile, tcfg.TLSKeyFile, tcfg.ClientCAFile = server.CertFile, server.KeyFile, ca.CertFile
		n, err := replica.New(tcfg)
		if err != nil {
			t.Fatalf("New with mTLS: %v", err)
		}
		for name, info := range described(t, treg) {
			if _, ok := out[name]; !ok {
				out[name] = info
			}
		}
		if err := n.Close(); err != nil {
			t.Fatalf("Close: %v", err)
		}
		exportedSet = out
	})
	if exportedSet == nil {
		t.Fatal("the exported metrics could not be gathered (see the first test that asked)")
	}
	return exportedSet
}

// described returns the metrics the collectors registered on reg
// describe, without their types.
func described(t *testing.T, reg *recordingRegisterer) map[string]metricInfo {
	t.Helper()
	out := map[string]metricInfo{}
	reg.mu.Lock()
	cs := slices.Clone(reg.collectors)
	reg.mu.Unlock()
	for _, c := range cs {
		ch := make(chan *prometheus.Desc, 64)
		go func() { c.Describe(ch); close(ch) }()
		for d := range ch {
			name, labels := parseDesc(t, d)
			out[name] = metricInfo{labels: labels}
		}
	}
	return out
}

func labelNames(m *dto.Metric) []string {
	var out []string
	for _, l := range m.GetLabel() {
		out = append(out, l.GetName())
	}
	sort.Strings(out)
	return out
}

// catalogueRow is one row of the metrics catalogue.
type catalogueRow struct {
	name   string // a metric name, or a prefix ending in '*'
	typ    string
	labels []string
	line   int
}

// The metrics catalogue: the page (relative to the repository's root)
// and the section of it holding the table.
const (
	catalogueFile    = "docs/reference/metrics.md"
	catalogueHeading = "## Every metric"
)

// readCatalogue parses the catalogue table: rows of
// | `name` | type | labels | meaning |, labels a comma list of
// backquoted names, "—" or nothing for none.
func readCatalogue(t *testing.T) []catalogueRow {
	t.Helper()
	f, err := os.Open(filepath.Join("..", "..", catalogueFile))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var rows []catalogueRow
	in, tableSeen := false, false
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		if strings.HasPrefix(line, "## ") {
			in = line == catalogueHeading
			continue
		}
		if !in || !strings.HasPrefix(line, "|") {
			if in && tableSeen && strings.TrimSpace(line) != "" && !strings.HasPrefix(line, "|") {
				in = false // the table ended
			}
			continue
		}
		tableSeen = true
		cells := strings.Split(strings.Trim(line, "|"), "|")
		if len(cells) < 4 {
			t.Fatalf("%s:%d: a catalogue row needs 4 cells (name, type, labels, meaning): %q", catalogueFile, n, line)
		}
		name := strings.TrimSpace(cells[0])
		if name == "metric" || strings.HasPrefix(name, "---") {
			continue
		}
		if !strings.HasPrefix(name, "`") || !strings.HasSuffix(name, "`") {
			t.Fatalf("%s:%d: the metric name %q is not in backquotes", catalogueFile, n, name)
		}
		row := catalogueRow{name: strings.Trim(name, "`"), typ: strings.TrimSpace(cells[1]), line: n}
		if l := strings.TrimSpace(cells[2]); l != "—" && l != "" {
			for _, p := range strings.Split(l, ",") {
				row.labels = append(row.labels, strings.Trim(strings.TrimSpace(p), "`"))
			}
			sort.Strings(row.labels)
		}
		if strings.TrimSpace(cells[3]) == "" {
			t.Errorf("%s:%d: %s has no meaning", catalogueFile, n, row.name)
		}
		rows = append(rows, row)
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if len(rows) == 0 {
		t.Fatalf("%s has no table under %q", catalogueFile, catalogueHeading)
	}
	return rows
}

// TestMetricsCatalogue: the metrics catalogue (docs/reference/metrics.md)
// lists exactly what
// a replica exports: every metric, with its type and labels, and nothing
// that does not exist. Rows ending in '*' stand for the families of the
// Go and process collectors (client_golang's), whose members change with
// the Go release and the platform; each must match something.
func TestMetricsCatalogue(t *testing.T) {
	checkLeaks(t)
	exported := exportedMetrics(t)
	rows := readCatalogue(t)

	listed := map[string]catalogueRow{}
	var prefixes []catalogueRow
	for _, r := range rows {
		if p, ok := strings.CutSuffix(r.name, "*"); ok {
			if !strings.HasPrefix(p, "go_") && !strings.HasPrefix(p, "process_") {
				t.Errorf("%s:%d: %s: only the go_ and process_ families may be listed by prefix", catalogueFile, r.line, r.name)
			}
			r.name = p
			prefixes = append(prefixes, r)
			continue
		}
		if _, dup := listed[r.name]; dup {
			t.Errorf("%s:%d: %s is listed twice", catalogueFile, r.line, r.name)
		}
		listed[r.name] = r
	}

	names := make([]string, 0, len(exported))
	for n := range exported {
		names = append(names, n)
	}
	sort.Strings(names)
	prefixUsed := map[string]bool{}
	for _, n := range names {
		info := exported[n]
		r, ok := listed[n]
		if !ok {
			matched := false
			for _, p := range prefixes {
				if strings.HasPrefix(n, p.name) {
					matched, prefixUsed[p.name] = true, true
				}
			}
			if !matched {
				t.Errorf("%s (%s, labels %v) is exported but not in %s's %q table", n, info.typ, info.labels, catalogueFile, catalogueHeading)
			}
			continue
		}
		if info.typ != "" && r.typ != info.typ {
			t.Errorf("%s:%d: %s is listed as a %s, the code exports a %s", catalogueFile, r.line, n, r.typ, info.typ)
		}
		if !slices.Equal(r.labels, info.labels) {
			t.Errorf("%s:%d: %s is listed with labels %v, the code exports %v", catalogueFile, r.line, n, r.labels, info.labels)
		}
	}
	for n, r := range listed {
		if _, ok := exported[n]; !ok {
			t.Errorf("%s:%d: %s is listed but no replica exports it", catalogueFile, r.line, n)
		}
	}
	for _, p := range prefixes {
		if !prefixUsed[p.name] {
			t.Errorf("%s:%d: %s* matches no exported metric", catalogueFile, p.line, p.name)
		}
	}
}
