package replica_test

import (
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
)

// dashboardFile is the Grafana dashboard shipped for operators.
const dashboardFile = "../../deploy/grafana/legation.json"

// promqlWords are PromQL's keywords, aggregation operators and modifiers,
// which may appear without a '(' right after them (the tokenizer skips
// every identifier called as a function, and the label lists of by,
// without, on, ignoring, group_left and group_right).
var promqlWords = map[string]bool{
	"and": true, "or": true, "unless": true, "bool": true, "offset": true, "atan2": true,
	"by": true, "without": true, "on": true, "ignoring": true, "group_left": true, "group_right": true,
	"inf": true, "nan": true,
	// Aggregations, which may take their by or without clause before
	// their parentheses (sum by (le) (...)).
	"sum": true, "min": true, "max": true, "avg": true, "group": true, "stddev": true, "stdvar": true,
	"count": true, "count_values": true, "bottomk": true, "topk": true, "quantile": true,
	"limitk": true, "limit_ratio": true,
}

// labelListWords are followed by a parenthesized list of label names.
var labelListWords = map[string]bool{"by": true, "without": true, "on": true, "ignoring": true, "group_left": true, "group_right": true}

// promqlMetricNames returns the metric names an expression selects, in
// order of appearance. It is a tokenizer, not a parser (Prometheus's
// parser is not a dependency): it drops string literals, the label
// matchers inside {...}, range and subquery brackets [...] and Grafana
// variables ($x, ${x}, [[x]]); then an identifier followed by '(' is a
// function or aggregation, the list after by/without/on/ignoring/
// group_left/group_right holds label names, the rest of PromQL's words
// are keywords, and every other identifier is a metric name. A selector
// by __name__ is refused: its metric could not be checked.
func promqlMetricNames(expr string) ([]string, error) {
	if strings.Contains(expr, "__name__") {
		return nil, fmt.Errorf("selects by __name__, which this check cannot follow: name the metric")
	}
	// Drop what holds no metric name, keeping a space in its place.
	var b strings.Builder
	depthBrace, depthBracket := 0, 0
	for i := 0; i < len(expr); i++ {
		c := expr[i]
		switch {
		case c == '"' || c == '\'' || c == '`':
			j := i + 1
			for ; j < len(expr) && expr[j] != c; j++ {
				if expr[j] == '\\' && c != '`' {
					j++
				}
			}
			if j >= len(expr) {
				return nil, fmt.Errorf("unterminated string at offset %d", i)
			}
			i = j
			b.WriteByte(' ')
		case c == '{':
			depthBrace++
		case c == '}':
			if depthBrace == 0 {
				return nil, fmt.Errorf("unbalanced } at offset %d", i)
			}
			depthBrace--
			b.WriteByte(' ')
		case c == '[':
			depthBracket++
		case c == ']':
			if depthBracket == 0 {
				return nil, fmt.Errorf("unbalanced ] at offset %d", i)
			}
			depthBracket--
			b.WriteByte(' ')
		case c == '$':
			// A Grafana variable: $name or ${name...}.
			if i+1 < len(expr) && expr[i+1] == '{' {
				end := strings.IndexByte(expr[i:], '}')
				if end < 0 {
					return nil, fmt.Errorf("unterminated ${ at offset %d", i)
				}
				i += end
			} else {
				for i+1 < len(expr) && isIdent(expr[i+1], false) {
					i++
				}
			}
			b.WriteByte(' ')
		case depthBrace > 0 || depthBracket > 0:
		default:
			b.WriteByte(c)
		}
	}
	if depthBrace != 0 || depthBracket != 0 {
		return nil, fmt.Errorf("unbalanced { or [")
	}
	s := b.String()

	var names []string
	for i := 0; i < len(s); {
		c := s[i]
		if !isIdent(c, true) {
			if c >= '0' && c <= '9' || c == '.' {
				// A number or a duration (5m, 1e3, 0x1f): skip it whole.
				for i < len(s) && (isIdent(s[i], false) || s[i] == '.') {
					i++
				}
				continue
			}
			i++
			continue
		}
		j := i
		for j < len(s) && isIdent(s[j], false) {
			j++
		}
		word := s[i:j]
		k := j
		for k < len(s) && (s[k] == ' ' || s[k] == '\t' || s[k] == '\n') {
			k++
		}
		called := k < len(s) && s[k] == '('
		lower := strings.ToLower(word)
		switch {
		case labelListWords[lower] && called:
			end := strings.IndexByte(s[k:], ')')
			if end < 0 {
				return nil, fmt.Errorf("unterminated %s( list", word)
			}
			j = k + end + 1
		case called, promqlWords[lower]:
		default:
			names = append(names, word)
		}
		i = j
	}
	return names, nil
}

func isIdent(c byte, first bool) bool {
	return c == '_' || c == ':' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || !first && c >= '0' && c <= '9'
}

func TestPromQLMetricNames(t *testing.T) {
	for _, tc := range []struct {
		expr string
		want []string
	}{
		{`legation_sotw_streams`, []string{"legation_sotw_streams"}},
		{`histogram_quantile(0.99, sum by (le, protocol) (rate(legation_xds_convergence_seconds_bucket{protocol="sotw", type=~"clu.*"}[5m])))`,
			[]string{"legation_xds_convergence_seconds_bucket"}},
		{`sum without(instance)(rate(a_total[$__rate_interval])) / on() group_left(job) b offset 5m`, []string{"a_total", "b"}},
		{`max(x) - on() group_right() y > bool 0.5 and z unless w or v`, []string{"x", "y", "z", "w", "v"}},
		{`rate(x{l="}{[("}[${__range}:1m])`, []string{"x"}},
		{`sum by(cluster)(rate(legation_lrs_requests_total[1m])) * 1e3`, []string{"legation_lrs_requests_total"}},
		{`sum by (instance) (a) + max without (job) (b:recorded)`, []string{"a", "b:recorded"}},
		{`topk(3, count_values("v", legation_build_info))`, []string{"legation_build_info"}},
	} {
		got, err := promqlMetricNames(tc.expr)
		if err != nil {
			t.Errorf("%s: %v", tc.expr, err)
			continue
		}
		if !slices.Equal(got, tc.want) {
			t.Errorf("%s: got %v, want %v", tc.expr, got, tc.want)
		}
	}
	for _, bad := range []string{`{__name__="x"}`, `rate(x[5m)`, `x{a="b"`, `x"`, `${x`} {
		if _, err := promqlMetricNames(bad); err == nil {
			t.Errorf("%s: no error", bad)
		}
	}
}

// exprs returns every "expr" string anywhere in a decoded dashboard
// (panel targets, rows' nested panels, variables' queries), with the
// title of the panel holding it.
func exprs(v any, title string, out map[string][]string) {
	switch x := v.(type) {
	case map[string]any:
		if t, ok := x["title"].(string); ok {
			title = t
		}
		for k, val := range x {
			if e, ok := val.(string); ok && k == "expr" {
				out[title] = append(out[title], e)
				continue
			}
			exprs(val, title, out)
		}
	case []any:
		for _, val := range x {
			exprs(val, title, out)
		}
	}
}

// TestGrafanaDashboard: deploy/grafana/legation.json decodes, has the
// panels an operator needs, and every metric its expressions name is one
// a replica exports (a histogram's by _bucket, _sum or _count).
func TestGrafanaDashboard(t *testing.T) {
	checkLeaks(t)
	raw, err := os.ReadFile(dashboardFile)
	if err != nil {
		t.Fatal(err)
	}
	var dash map[string]any
	if err := json.Unmarshal(raw, &dash); err != nil {
		t.Fatalf("%s: %v", dashboardFile, err)
	}
	byPanel := map[string][]string{}
	exprs(dash["panels"], "", byPanel)
	for _, want := range []string{"Convergence p50 / p99", "Pushes", "NACKs", "Streams per replica", "Ring shares", "etcd lag", "LRS totals"} {
		found := false
		for title := range byPanel {
			if strings.Contains(title, want) {
				found = true
			}
		}
		if !found {
			t.Errorf("%s: no panel titled %q with an expression", dashboardFile, want)
		}
	}

	exported := exportedMetrics(t)
	exists := func(name string) bool { return exportsSeries(exported, name) }
	n := 0
	for title, es := range byPanel {
		for _, e := range es {
			names, err := promqlMetricNames(e)
			if err != nil {
				t.Errorf("panel %q: %q: %v", title, e, err)
				continue
			}
			if len(names) == 0 {
				t.Errorf("panel %q: %q names no metric", title, e)
			}
			for _, name := range names {
				n++
				if !exists(name) {
					t.Errorf("panel %q: %q uses %s, which no replica exports", title, e, name)
				}
			}
		}
	}
	if n == 0 {
		t.Fatalf("%s: no metric found in any expression", dashboardFile)
	}
}

// exportsSeries reports whether name is a series a replica exports: a
// metric of exported, or a histogram's _bucket, _sum or _count (a
// summary's _sum or _count).
func exportsSeries(exported map[string]metricInfo, name string) bool {
	if _, ok := exported[name]; ok {
		return true
	}
	for _, suffix := range []string{"_bucket", "_sum", "_count"} {
		base, ok := strings.CutSuffix(name, suffix)
		if !ok {
			continue
		}
		if info, ok := exported[base]; ok && (info.typ == "histogram" || info.typ == "summary" && suffix != "_bucket") {
			return true
		}
	}
	return false
}
