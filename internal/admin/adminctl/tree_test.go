package adminctl

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/spf13/cobra"
)

// TestCommandTreeRefusesUnknown walks every command: a word that names
// no subcommand of a command of commands, at any level, exits 2 naming
// it, with the subcommand a typo came from suggested; an unknown flag
// exits 2 on every command; and every command states the arguments it
// takes (none left to cobra, which lets any through).
func TestCommandTreeRefusesUnknown(t *testing.T) {
	noEnv := func(string) (string, bool) { return "", false }
	run := func(args ...string) (int, string) {
		var out, errOut bytes.Buffer
		code := run(context.Background(), args, strings.NewReader(""), &out, &errOut, noEnv)
		return code, errOut.String()
	}
	var walk func(c *cobra.Command, path []string)
	walk = func(c *cobra.Command, path []string) {
		if c.Args == nil {
			t.Errorf("%s: states no Args", c.CommandPath())
		}
		if code, stderr := run(append(path, "--no-such-flag")...); code != exitUsage || !strings.Contains(stderr, "unknown flag: --no-such-flag") {
			t.Errorf("%s --no-such-flag: exit %d, %q; want 2 naming the flag", c.CommandPath(), code, stderr)
		}
		if c.HasSubCommands() {
			code, stderr := run(append(path, "zzqx")...)
			if code != exitUsage || !strings.Contains(stderr, `unknown command "zzqx" for "`+c.CommandPath()+`"`) {
				t.Errorf("%s zzqx: exit %d, %q; want 2 naming the word", c.CommandPath(), code, stderr)
			}
		}
		for _, sub := range c.Commands() {
			if !sub.IsAvailableCommand() || sub.Name() == "help" {
				continue
			}
			if typo := transpose(sub.Name()); typo != sub.Name() && c.HasSubCommands() {
				code, stderr := run(append(path, typo)...)
				if code != exitUsage || !strings.Contains(stderr, "Did you mean this?\n") || !strings.Contains(stderr, "\n\t"+sub.Name()+"\n") {
					t.Errorf("%s %s: exit %d, %q; want 2 suggesting %s", c.CommandPath(), typo, code, stderr, sub.Name())
				}
			}
			walk(sub, append(append([]string{}, path...), sub.Name()))
		}
	}
	root := (&app{lookupEnv: noEnv}).rootCommand()
	walk(root, nil)
}

// transpose swaps the last two letters of a name: a typo one edit away.
func transpose(s string) string {
	if len(s) < 3 {
		return s
	}
	b := []byte(s)
	b[len(b)-1], b[len(b)-2] = b[len(b)-2], b[len(b)-1]
	return string(b)
}
