package adminctl

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/legation-io/legation/internal/testkit/docgen"
)

// referencePage is xdsadmin's reference page: its global flags and, per
// command, the usage, flags and examples are generated from the commands.
// A command's region may be on one of referencePages instead.
const referencePage = "docs/reference/xdsadmin.md"

// referencePages are the pages that hold the commands' regions.
var referencePages = []string{referencePage, "docs/reference/xdsadmin-changes.md"}

// globalFlagsRegion is the page's region of the global flags.
const globalFlagsRegion = "xdsadmin-global-flags"

// commands are the command tree under root, root first, parents before
// their subcommands.
func commands(root *cobra.Command) []*cobra.Command {
	out := []*cobra.Command{root}
	for _, c := range root.Commands() {
		out = append(out, commands(c)...)
	}
	return out
}

// regionName is the page's region of command c: "xdsadmin-apply",
// "xdsadmin-authz-grant"; "xdsadmin" for the root.
func regionName(c *cobra.Command) string {
	return strings.ReplaceAll(c.CommandPath(), " ", "-")
}

// commandRegion renders c's region: its usage line, what it does, its
// own flags (or its commands) and its examples, a paragraph each.
func commandRegion(c *cobra.Command) string {
	// "`xdsadmin get TYPE [NAME] [flags]`: show the stored resources ..."
	short := strings.ToLower(c.Short[:1]) + c.Short[1:]
	parts := []string{"`" + useLine(c) + "`: " + short + "."}
	flags := docgen.Flags(c.LocalNonPersistentFlags())
	switch {
	case len(flags) > 0:
		parts = append(parts, strings.TrimSuffix(docgen.FlagTable{}.Render(flags), "\n"))
	case c.HasSubCommands() && c.HasParent():
		var links []string
		for _, s := range c.Commands() {
			links = append(links, fmt.Sprintf("[%s](#%s)", s.Name(), regionName(s)))
		}
		parts = append(parts, "Commands: "+strings.Join(links, ", ")+".")
	case c.HasParent():
		parts = append(parts, "No flags of its own: the global flags apply.")
	}
	parts = append(parts, docgen.Code("sh", c.Example))
	return strings.Join(parts, "\n\n")
}

// useLine is c's usage line as its --help shows it: the global flags
// apply to every command, and a command of commands takes one.
func useLine(c *cobra.Command) string {
	if c.HasSubCommands() {
		return c.CommandPath() + " [command]"
	}
	return strings.TrimSuffix(c.UseLine(), " [flags]") + " [flags]"
}

// TestDocsXdsadmin checks the reference page against the commands: the
// global flags with their variables, and a region per command; and that
// the page has no region of a command that is gone.
func TestDocsXdsadmin(t *testing.T) {
	root := (&app{}).rootCommand()
	table := docgen.FlagTable{Env: func(f *pflag.Flag) string { return envName(f.Name) }}
	docgen.Region(t, referencePage, globalFlagsRegion, table.Render(docgen.Flags(root.PersistentFlags())))
	pages := map[string]string{}
	for _, p := range referencePages {
		b, err := os.ReadFile(filepath.Join(docgen.Root(t), p))
		if err != nil {
			t.Fatal(err)
		}
		pages[p] = string(b)
	}
	want := map[string]bool{globalFlagsRegion: true}
	for _, c := range commands(root) {
		want[regionName(c)] = true
		page := referencePage
		for _, p := range referencePages {
			if strings.Contains(pages[p], "<!-- "+regionName(c)+":begin -->") {
				page = p
			}
		}
		docgen.Region(t, page, regionName(c), commandRegion(c))
	}
	for _, p := range referencePages {
		for _, m := range regexp.MustCompile(`<!-- (xdsadmin[-a-z]*):begin -->`).FindAllStringSubmatch(pages[p], -1) {
			if !want[m[1]] {
				t.Errorf("%s: region %q is of no command: remove it", p, m[1])
			}
		}
	}
}

// TestHelpExamples: every command's --help has examples, one at least
// runs that command (or, for a command of commands, one of them), and each example's command line parses: the
// command exists, its flags and arguments are accepted and the global
// flags are valid.
func TestHelpExamples(t *testing.T) {
	for _, c := range commands((&app{}).rootCommand()) {
		t.Run(c.CommandPath(), func(t *testing.T) {
			var out bytes.Buffer
			args := append(strings.Fields(c.CommandPath())[1:], "--help")
			if code := run(context.Background(), args, nil, &out, &out, noEnv); code != 0 || !strings.Contains(out.String(), "\nExamples:\n  ") {
				t.Fatalf("xdsadmin %s: exit %d, want 0 and examples:\n%s", strings.Join(args, " "), code, out.String())
			}
			cmds, err := docgen.Commands(c.Example, "xdsadmin")
			if err != nil {
				t.Fatal(err)
			}
			runsIt := false
			for _, ex := range cmds {
				path, err := checkExample(ex)
				if err != nil {
					t.Errorf("example xdsadmin %s: %v", strings.Join(ex, " "), err)
				}
				runsIt = runsIt || path == c.CommandPath() || strings.HasPrefix(path, c.CommandPath()+" ")
			}
			if !runsIt {
				t.Errorf("no example runs %s (or one of its commands):\n%s", c.CommandPath(), c.Example)
			}
		})
	}
}

// checkExample parses an example's arguments as xdsadmin would, short
// of running the command, and returns the path of the command they name.
func checkExample(args []string) (string, error) {
	a := &app{lookupEnv: noEnv}
	root := a.rootCommand()
	c, rest, err := root.Find(args)
	if err != nil {
		return "", err
	}
	if err := c.ParseFlags(rest); err != nil {
		return c.CommandPath(), err
	}
	if err := c.ValidateArgs(c.Flags().Args()); err != nil {
		return c.CommandPath(), err
	}
	if err := a.opts.Validate(); err != nil {
		return c.CommandPath(), err
	}
	return c.CommandPath(), nil
}

// noEnv is an empty environment.
func noEnv(string) (string, bool) { return "", false }
