package main

import (
	"strings"
	"testing"

	"github.com/spf13/pflag"

	"github.com/legation-io/legation/internal/testkit/docgen"
	"github.com/legation-io/legation/internal/tools/loadgen"
)

// referencePage is xds-loadgen's reference page, whose flag table and
// examples are generated from the flag set.
const referencePage = "docs/reference/xds-loadgen.md"

// newFlagSet is xds-loadgen's flag set with the defaults.
func newFlagSet() *pflag.FlagSet {
	cfg := loadgen.DefaultConfig()
	opts := defaultOptions()
	var quiet bool
	return flagSet(&cfg, &opts, &quiet)
}

// TestDocsXdsLoadgen checks the reference page's flag table and examples
// against the flag set (`make docs` rewrites them).
func TestDocsXdsLoadgen(t *testing.T) {
	docgen.Region(t, referencePage, "xds-loadgen-flags", docgen.FlagTable{}.Render(docgen.Flags(newFlagSet())))
	docgen.Region(t, referencePage, "xds-loadgen-examples", docgen.Code("sh", usageExamples))
}

// TestUsageExamples: each example of --help parses into a valid
// configuration.
func TestUsageExamples(t *testing.T) {
	cmds, err := docgen.Commands(usageExamples, "xds-loadgen")
	if err != nil {
		t.Fatal(err)
	}
	for _, args := range cmds {
		if _, _, err := parseFlags(args); err != nil {
			t.Errorf("example xds-loadgen %s: %v", strings.Join(args, " "), err)
		}
	}
}

// TestFlagErrorsNameTheFlag gives every flag values a flag of its type
// may well refuse, for either target: each error must name the flag.
func TestFlagErrorsNameTheFlag(t *testing.T) {
	values := map[string][]string{
		"duration":    {"-1s", "0s", "1ns", "100000h", "soon"},
		"int":         {"-1", "0", "999999999", "many"},
		"float64":     {"-1", "0", "0.5", "1", "1e12", "NaN"},
		"string":      {"", "bad value", "x", "a/b", ":1"},
		"stringSlice": {" ", "bad value", "x", ":1", "http://a:1,https://b:1", "ftp://x"},
		"bool":        {"maybe"},
	}
	for _, target := range []string{"legation", "gcp"} {
		for _, f := range docgen.Flags(newFlagSet()) {
			for _, v := range values[f.Value.Type()] {
				args := []string{"--quiet", "--target", target, "--" + f.Name + "=" + v}
				if _, _, err := parseFlags(args); !docgen.NamesFlag(err, f) {
					t.Errorf("xds-loadgen %s: %v; want the error to name --%s", strings.Join(args, " "), err, f.Name)
				}
			}
		}
	}
}
