package docgen

import (
	"fmt"
	"strings"

	"github.com/spf13/pflag"
)

// FlagTable renders flags as a Markdown table: the flag with its value's
// type (as --help shows it), optionally the environment variable that
// sets it, its default and its meaning (the usage string).
type FlagTable struct {
	// Env names the environment variable that sets a flag, shown in a
	// column of its own ("-" where it returns "", no variable sets the
	// flag); nil: the table has no such column.
	Env func(f *pflag.Flag) string
	// Defaults are Markdown shown as the default of the flags they name,
	// in place of the flag set's, for defaults that depend on the machine
	// (the host name, the temporary directory) or on other flags.
	Defaults map[string]string
}

// Flags are the flags of fs that --help lists (neither hidden nor
// deprecated), in its order.
func Flags(fs *pflag.FlagSet) []*pflag.Flag {
	var out []*pflag.Flag
	fs.VisitAll(func(f *pflag.Flag) {
		if !f.Hidden && f.Deprecated == "" {
			out = append(out, f)
		}
	})
	return out
}

// Render returns the table of flags, a line a flag after the header.
func (t FlagTable) Render(flags []*pflag.Flag) string {
	var b strings.Builder
	if t.Env != nil {
		b.WriteString("| flag | environment variable | default | meaning |\n| --- | --- | --- | --- |\n")
	} else {
		b.WriteString("| flag | default | meaning |\n| --- | --- | --- |\n")
	}
	for _, f := range flags {
		typ, usage := pflag.UnquoteUsage(f)
		name := "`--" + f.Name
		if typ != "" {
			name += " " + typ
		}
		name += "`"
		if f.Shorthand != "" {
			name = "`-" + f.Shorthand + "`, " + name
		}
		cells := []string{name}
		if t.Env != nil {
			cells = append(cells, envCell(t.Env(f)))
		}
		def, ok := t.Defaults[f.Name]
		if !ok {
			def = defaultCell(f)
		}
		cells = append(cells, def, escape(usage))
		fmt.Fprintf(&b, "| %s |\n", strings.Join(cells, " | "))
	}
	return b.String()
}

// defaultCell is a flag's default as a table cell: "empty" for an empty
// string or list, else the value in backquotes (a list's without its
// brackets).
func defaultCell(f *pflag.Flag) string {
	def := f.DefValue
	if _, ok := f.Value.(pflag.SliceValue); ok || f.Value.Type() == "stringToString" {
		def = strings.TrimSuffix(strings.TrimPrefix(def, "["), "]")
	}
	if def == "" {
		return "empty"
	}
	return "`" + def + "`"
}

// markdownEscapes are the characters of a usage string that Markdown
// would take for syntax in a table cell: a cell's end, emphasis, an HTML
// tag, code.
var markdownEscapes = strings.NewReplacer("|", `\|`, "*", `\*`, "<", `\<`, "`", "\\`", "\n", " ")

// escape makes text safe in a Markdown table cell, as it reads.
func escape(text string) string { return markdownEscapes.Replace(text) }

// Code returns text as a fenced code block of the language lang, its
// common indentation removed.
func Code(lang, text string) string {
	lines := strings.Split(strings.TrimRight(text, "\n"), "\n")
	indent := -1
	for _, l := range lines {
		if strings.TrimSpace(l) == "" {
			continue
		}
		n := len(l) - len(strings.TrimLeft(l, " "))
		if indent < 0 || n < indent {
			indent = n
		}
	}
	var b strings.Builder
	b.WriteString("```" + lang + "\n")
	for _, l := range lines {
		if len(l) >= indent && indent > 0 {
			l = l[indent:]
		}
		b.WriteString(strings.TrimRight(l, " ") + "\n")
	}
	b.WriteString("```\n")
	return b.String()
}

// envCell is the environment variable's cell: "-" when none sets the flag.
func envCell(env string) string {
	if env == "" {
		return "-"
	}
	return "`" + env + "`"
}

// NamesFlag reports whether err, the refusal of a value of flag f, names
// the flag (--name, or its shorthand), so that a user knows what to
// change; a nil err (the value was taken) names nothing and needs not.
func NamesFlag(err error, f *pflag.Flag) bool {
	if err == nil {
		return true
	}
	msg := err.Error()
	return strings.Contains(msg, "--"+f.Name) || f.Shorthand != "" && strings.Contains(msg, "-"+f.Shorthand)
}
