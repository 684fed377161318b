package main

import (
	"strings"
	"testing"

	"github.com/spf13/pflag"

	"github.com/legation-io/legation/internal/testkit/docgen"
	"github.com/legation-io/legation/internal/tools/chaos/runner"
)

// referencePage is xds-chaos's reference page, whose flag table and
// examples are generated from the flag set.
const referencePage = "docs/reference/xds-chaos.md"

// newFlagSet is xds-chaos's flag set with the defaults.
func newFlagSet() *pflag.FlagSet {
	cfg := runner.DefaultConfig()
	var o options
	return flagSet(&cfg, &o)
}

// TestDocsXdsChaos checks the reference page's flag table and examples
// against the flag set (`make docs` rewrites them).
func TestDocsXdsChaos(t *testing.T) {
	table := docgen.FlagTable{Defaults: map[string]string{"dir": "the temporary directory (`$TMPDIR`, else `/tmp`)"}}
	docgen.Region(t, referencePage, "xds-chaos-flags", table.Render(docgen.Flags(newFlagSet())))
	docgen.Region(t, referencePage, "xds-chaos-examples", docgen.Code("sh", usageExamples))
}

// TestUsageExamples: each example of --help parses into a valid
// configuration.
func TestUsageExamples(t *testing.T) {
	cmds, err := docgen.Commands(usageExamples, "xds-chaos")
	if err != nil {
		t.Fatal(err)
	}
	for _, args := range cmds {
		if _, _, _, err := parseFlags(args); err != nil {
			t.Errorf("example xds-chaos %s: %v", strings.Join(args, " "), err)
		}
	}
}

// TestFlagErrorsNameTheFlag gives every flag values a flag of its type
// may well refuse: each error must name the flag.
func TestFlagErrorsNameTheFlag(t *testing.T) {
	values := map[string][]string{
		"duration":    {"-1s", "0s", "1ns", "soon"},
		"int":         {"-1", "0", "999999999", "many"},
		"uint64":      {"-1"},
		"string":      {"", "bad value", "x", "1,x"},
		"stringSlice": {" ", "x"},
		"bool":        {"maybe"},
	}
	for _, f := range docgen.Flags(newFlagSet()) {
		for _, v := range values[f.Value.Type()] {
			args := []string{"--" + f.Name + "=" + v}
			if _, _, _, err := parseFlags(args); !docgen.NamesFlag(err, f) {
				t.Errorf("xds-chaos %s: %v; want the error to name --%s", strings.Join(args, " "), err, f.Name)
			}
		}
	}
}
