package docgen

import (
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"
)

func TestFlagTable(t *testing.T) {
	fs := pflag.NewFlagSet("x", pflag.ContinueOnError)
	fs.SortFlags = false
	fs.StringSlice("endpoints", []string{"a:1", "b:2"}, "where | how, `HOSTS` to reach")
	fs.Duration("wait", 3*time.Second, "how long; <none>: *none*")
	fs.StringP("output", "o", "", "format")
	fs.String("name", "host-7", "the name")
	fs.Bool("old", false, "gone")
	_ = fs.MarkHidden("old")
	env := func(f *pflag.Flag) string { return "X_" + strings.ToUpper(f.Name) }
	got := FlagTable{Env: env, Defaults: map[string]string{"name": "the host name"}}.Render(Flags(fs))
	want := "| flag | environment variable | default | meaning |\n| --- | --- | --- | --- |\n" +
		"| `--endpoints HOSTS` | `X_ENDPOINTS` | `a:1,b:2` | where \\| how, HOSTS to reach |\n" +
		"| `--wait duration` | `X_WAIT` | `3s` | how long; \\<none>: \\*none\\* |\n" +
		"| `-o`, `--output string` | `X_OUTPUT` | empty | format |\n" +
		"| `--name string` | `X_NAME` | the host name | the name |\n"
	if got != want {
		t.Errorf("table:\n%s\nwant:\n%s", got, want)
	}
	if got := (FlagTable{}).Render(nil); got != "| flag | default | meaning |\n| --- | --- | --- |\n" {
		t.Errorf("table without an environment column: %q", got)
	}
}

func TestCode(t *testing.T) {
	got := Code("sh", "  a \\\n    b\n\n  c\n")
	if want := "```sh\na \\\n  b\n\nc\n```\n"; got != want {
		t.Errorf("Code = %q, want %q", got, want)
	}
}

func TestCommands(t *testing.T) {
	text := `  # a comment
  prog get -o yaml | prog apply -f -
  prog status -o json | jq '.[] | select(.x != null)'
  prog apply --name 'a b' "c d" e\ f \
    --more # trailing comment
  prog export --dir ./x > out.txt
  other --flag`
	got, err := Commands(text, "prog")
	if err != nil {
		t.Fatal(err)
	}
	want := [][]string{
		{"get", "-o", "yaml"}, {"apply", "-f", "-"},
		{"status", "-o", "json"},
		{"apply", "--name", "a b", "c d", "e f", "--more"},
		{"export", "--dir", "./x"},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("Commands =\n%q\nwant\n%q", got, want)
	}
	for _, bad := range []string{"other --flag", "prog 'open"} {
		if _, err := Commands(bad, "prog"); err == nil {
			t.Errorf("Commands(%q) = no error", bad)
		}
	}
}

func TestNamesFlag(t *testing.T) {
	fs := pflag.NewFlagSet("x", pflag.ContinueOnError)
	fs.StringP("output", "o", "", "")
	fs.Int("streams", 1, "")
	out, streams := fs.Lookup("output"), fs.Lookup("streams")
	for _, tc := range []struct {
		err  error
		f    *pflag.Flag
		want bool
	}{
		{nil, streams, true},
		{errors.New("--streams 0: must be in [1, 10]"), streams, true},
		{errors.New("must be in [1, 10]"), streams, false},
		{errors.New(`-o "xml": want table or json`), out, true},
		{errors.New("--stream 0"), out, false},
	} {
		if got := NamesFlag(tc.err, tc.f); got != tc.want {
			t.Errorf("NamesFlag(%v, --%s) = %v, want %v", tc.err, tc.f.Name, got, tc.want)
		}
	}
}
