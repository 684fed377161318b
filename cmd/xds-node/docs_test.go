package main

import (
	"fmt"
	"strings"
	"testing"

	"github.com/spf13/pflag"

	"github.com/legation-io/legation/internal/replica"
	"github.com/legation-io/legation/internal/testkit/docgen"
)

// referencePage is xds-node's reference page, whose flag tables and
// examples are generated from the flag set.
const referencePage = "docs/reference/xds-node.md"

// TestDocsXdsNode checks the reference page's flag tables, one per area
// of --help, and its examples, against the flag set (`make docs`
// rewrites them).
func TestDocsXdsNode(t *testing.T) {
	cfg := replica.DefaultConfig()
	fs, _, _ := newFlagSet(&cfg)
	defaults := map[string]string{"name": "the host name"}
	for _, name := range devLoopbackFlags {
		def := fs.Lookup(name).DefValue
		defaults[name] = fmt.Sprintf("`%s`; dev mode: `%s`", def, loopbackDefault(def))
	}
	table := docgen.FlagTable{Env: func(f *pflag.Flag) string { return flagEnv(f.Name) }, Defaults: defaults}
	var b strings.Builder
	for i, a := range flagAreas(fs) {
		if i > 0 {
			b.WriteString("\n")
		}
		fmt.Fprintf(&b, "### %s\n\n%s", a.title, table.Render(a.flags))
	}
	docgen.Region(t, referencePage, "xds-node-flags", b.String())
	docgen.Region(t, referencePage, "xds-node-examples", docgen.Code("sh", usageExamples))
}

// TestUsageExamples: --help lists every flag --help should, area by
// area, and ends with examples, each of which parses into a valid
// configuration.
func TestUsageExamples(t *testing.T) {
	cfg := replica.DefaultConfig()
	fs, _, _ := newFlagSet(&cfg)
	var b strings.Builder
	printUsage(&b, fs)
	usage := b.String()
	for _, f := range docgen.Flags(fs) {
		if !strings.Contains(usage, "--"+f.Name+" ") {
			t.Errorf("--help does not list --%s", f.Name)
		}
	}
	if !strings.Contains(usage, "\nExamples:\n  ") {
		t.Errorf("--help has no examples:\n%s", usage)
	}
	cmds, err := docgen.Commands(usageExamples, "xds-node")
	if err != nil {
		t.Fatal(err)
	}
	for _, args := range cmds {
		if _, err := parseFlags(args); err != nil {
			t.Errorf("example xds-node %s: %v", strings.Join(args, " "), err)
		}
	}
}

// TestFlagErrorsNameTheFlag gives every flag values a flag of its type
// may well refuse, in dev mode and in etcd mode: each error must name
// the flag (or its variable), so that the user knows what to change.
func TestFlagErrorsNameTheFlag(t *testing.T) {
	cfg := replica.DefaultConfig()
	fs, _, _ := newFlagSet(&cfg)
	values := map[string][]string{
		"duration":    {"-1s", "0s", "1ns", "100000h", "soon"},
		"int":         {"-1", "0", "999999999", "many"},
		"float64":     {"-1", "0", "0.5", "1e12", "NaN"},
		"string":      {"", "bad value", "x", "a/b", ":1", "spiffe://x", "metadata:"},
		"stringSlice": {" ", "bad value", "x", "a/b", ":1", "spiffe://x", "http://a:1,https://b:1", "ftp://x"},
		"bool":        {"maybe"},
	}
	for _, mode := range [][]string{nil, {"--etcd-endpoints", "a:2379"}} {
		for _, f := range docgen.Flags(fs) {
			for _, v := range values[f.Value.Type()] {
				args := append(append([]string{}, mode...), "--"+f.Name+"="+v)
				if _, err := parseFlags(args); !docgen.NamesFlag(err, f) {
					t.Errorf("xds-node %s: %v; want the error to name --%s", strings.Join(args, " "), err, f.Name)
				}
			}
		}
	}
}
