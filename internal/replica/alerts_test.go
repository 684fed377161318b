package replica_test

import (
	"os"
	"testing"

	"sigs.k8s.io/yaml"
)

// alertsFile is the Prometheus alerting rules shipped for operators.
const alertsFile = "../../deploy/prometheus/legation-alerts.yaml"

// alertRules is the part of a Prometheus rule file the check reads.
type alertRules struct {
	Groups []struct {
		Name  string `json:"name"`
		Rules []struct {
			Alert       string            `json:"alert"`
			Expr        string            `json:"expr"`
			For         string            `json:"for"`
			Labels      map[string]string `json:"labels"`
			Annotations map[string]string `json:"annotations"`
		} `json:"rules"`
	} `json:"groups"`
}

// prometheusSeries are the series Prometheus makes itself for every
// scrape target, which an alert may name besides the replicas' metrics.
var prometheusSeries = map[string]bool{"up": true}

// TestAlertRules: deploy/prometheus/legation-alerts.yaml decodes (strictly:
// a misspelt field fails), every rule is an alert with an expression, a
// severity and a summary, names are unique, and every metric an
// expression names is one a replica exports.
func TestAlertRules(t *testing.T) {
	checkLeaks(t)
	raw, err := os.ReadFile(alertsFile)
	if err != nil {
		t.Fatal(err)
	}
	var rules alertRules
	if err := yaml.UnmarshalStrict(raw, &rules); err != nil {
		t.Fatalf("%s: %v", alertsFile, err)
	}
	exported := exportedMetrics(t)
	seen := map[string]bool{}
	for _, g := range rules.Groups {
		if g.Name == "" || len(g.Rules) == 0 {
			t.Errorf("%s: a group needs a name and rules: %q", alertsFile, g.Name)
		}
		for _, r := range g.Rules {
			switch {
			case r.Alert == "" || r.Expr == "":
				t.Errorf("group %s: a rule without alert or expr: %+v", g.Name, r)
				continue
			case seen[r.Alert]:
				t.Errorf("%s is defined twice", r.Alert)
			case r.Labels["severity"] == "" || r.Annotations["summary"] == "":
				t.Errorf("%s: needs labels.severity and annotations.summary", r.Alert)
			}
			seen[r.Alert] = true
			names, err := promqlMetricNames(r.Expr)
			if err != nil || len(names) == 0 {
				t.Errorf("%s: %q: %v (names %v)", r.Alert, r.Expr, err, names)
				continue
			}
			for _, name := range names {
				if !prometheusSeries[name] && !exportsSeries(exported, name) {
					t.Errorf("%s: %q uses %s, which no replica exports", r.Alert, r.Expr, name)
				}
			}
		}
	}
	if len(seen) == 0 {
		t.Fatalf("%s: no alert", alertsFile)
	}
}
