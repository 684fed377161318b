package adminctl

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
	"unicode"
	"unicode/utf8"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"sigs.k8s.io/yaml"

	"github.com/legation-io/legation/internal/state/store"
)

// newTable returns a writer that aligns tab-separated columns; Flush it.
func newTable(w io.Writer) *tabwriter.Writer {
	return tabwriter.NewWriter(w, 0, 8, 2, ' ', 0)
}

// row writes one tab-separated line to a table, each column printable
// (printable). A table buffers its lines and writes them out in Flush,
// which reports a write error; every caller returns it.
func row(w *tabwriter.Writer, cols ...any) {
	var line strings.Builder
	for i, c := range cols {
		if i > 0 {
			line.WriteByte('\t')
		}
		line.WriteString(printable(fmt.Sprint(c)))
	}
	line.WriteByte('\n')
	io.WriteString(w, line.String()) //nolint:errcheck // buffered; Flush reports a write error
}

// printable returns s with each control character (C0 with tab and
// newline, DEL, C1) and each byte that is not UTF-8 written as a Go
// escape (\x1b, \r, \u0085, \xff): what a client or etcd gave (node
// ids, NACK text, rollout reasons, metadata) shows as text in a table,
// never as a terminal escape, a carriage return over the line or a tab
// that shifts the columns. Anything else, backslashes included, is kept.
func printable(s string) string {
	if utf8.ValidString(s) && !strings.ContainsFunc(s, unicode.IsControl) {
		return s
	}
	var b strings.Builder
	for len(s) > 0 {
		r, n := utf8.DecodeRuneInString(s)
		switch {
		case r == utf8.RuneError && n == 1:
			fmt.Fprintf(&b, `\x%02x`, s[0])
		case unicode.IsControl(r):
			q := strconv.QuoteRune(r)
			b.WriteString(q[1 : len(q)-1])
		default:
			b.WriteString(s[:n])
		}
		s = s[n:]
	}
	return b.String()
}

// printStructured writes v as indented JSON or as YAML, per -o.
func (a *app) printStructured(v any) error {
	b, err := marshalStructured(a.opts.Output, v)
	if err != nil {
		return err
	}
	_, err = a.out.Write(b)
	return err
}

func marshalStructured(format string, v any) ([]byte, error) {
	switch format {
	case outputJSON:
		b, err := json.MarshalIndent(v, "", "  ")
		if err != nil {
			return nil, fmt.Errorf("encode output: %w", err)
		}
		return append(b, '\n'), nil
	case outputYAML:
		b, err := yaml.Marshal(v)
		if err != nil {
			return nil, fmt.Errorf("encode output: %w", err)
		}
		return b, nil
	}
	return nil, fmt.Errorf("no structured output %q", format)
}

// warnMalformed tells the operator about values in etcd that do not decode
// (written by another tool, or corrupted): they are skipped, not fatal.
func (a *app) warnMalformed(ms []store.Malformed) {
	for _, m := range ms {
		fmt.Fprintf(a.errOut, "warning: skipped malformed value at key %q (mod_revision %d): %v\n", m.EtcdKey, m.ModRevision, m.Err)
	}
}

// change is one resource in apply, delete, diff and watch output.
type change struct {
	Action string `json:"action"`
	Type   string `json:"type"`
	Scope  string `json:"scope"`
	Name   string `json:"name"`
}

func changeOf(c store.Change) change {
	return change{Action: c.Action.String(), Type: c.Type.Name, Scope: c.Scope, Name: c.Name}
}

// counts tallies changes by action.
type counts struct {
	Created   int `json:"created"`
	Changed   int `json:"changed"`
	Unchanged int `json:"unchanged"`
	Deleted   int `json:"deleted"`
}

func (n *counts) add(a store.Action) {
	switch a {
	case store.Create:
		n.Created++
	case store.Update:
		n.Changed++
	case store.Unchanged:
		n.Unchanged++
	case store.Delete:
		n.Deleted++
	}
}

func (n counts) String() string {
	return fmt.Sprintf("%d created, %d changed, %d unchanged, %d deleted", n.Created, n.Changed, n.Unchanged, n.Deleted)
}

// marshalResource encodes a stored body as the proto3 JSON document apply
// accepts: the message's fields plus "@type", with proto field names like
// the examples. Nested Any fields resolve through the types package
// resource links in.
func marshalResource(m proto.Message) ([]byte, error) {
	b, err := protojson.MarshalOptions{UseProtoNames: true}.Marshal(m)
	if err != nil {
		return nil, err
	}
	// protojson's spacing is deliberately unstable; normalise it.
	var buf bytes.Buffer
	if err := json.Indent(&buf, b, "", "  "); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// formatTTL shows a lease's TTL: the period asked for and what is left.
func formatTTL(asked time.Duration, left int64, known bool) string {
	var parts []string
	if asked > 0 {
		parts = append(parts, asked.String())
	}
	switch {
	case !known:
	case left < 0:
		parts = append(parts, "(expired)")
	default:
		parts = append(parts, fmt.Sprintf("(%s left)", time.Duration(left)*time.Second))
	}
	if len(parts) == 0 {
		return "-"
	}
	return strings.Join(parts, " ")
}
