package adminctl

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/spf13/cobra"

	"github.com/legation-io/legation/internal/state/resource"
	"github.com/legation-io/legation/internal/state/store"
)

type historyFlags struct {
	scope string
	limit int
}

func (a *app) historyCommand() *cobra.Command {
	var f historyFlags
	cmd := &cobra.Command{
		Use:   "history [TYPE [NAME]]",
		Short: "Show the applies and deletes written, newest first: who, when, why, and what each changed",
		Long: `history shows the applies and deletes written through xdsadmin (and every
other writer that goes through Legation's store), newest first. Each is
recorded in etcd in the same transaction as its changes, so the record
exists exactly when they were written, at the same revision. The newest
--history-keep records are kept (100 by default), each with the body every
changed or deleted resource had before, so that what an apply replaced is
known after etcd compacted its revisions.

With TYPE, only the applies that changed a resource of that type, and of
them only those changes; with NAME too, only that resource. --scope keeps
the changes to one scope.

TYPE is a short name (cluster, endpoint, listener, route, scoped-route,
virtual-host, secret, runtime, extension-config), an alias (cds, eds, ...)
or a type URL.

Output:
  table  ID, REVISION, TIME (UTC), BY, KIND (apply or delete), CHANGES
         (created, changed, deleted), MESSAGE (apply -m).
  yaml   one object per apply: id, revisions (one per transaction of a
         --chunked apply), kind, by, at, message, the changes (action,
         type, scope, name), omitted (changes a record had no room for)
         and undo (whether every body from before is kept).
  json   the same as JSON.`,
		Example: `  xdsadmin history
  xdsadmin history cluster backend-a --scope edge
  xdsadmin history --limit 5 -o json | jq '.[] | {id, by, message}'`,
		Args:              rangeArgs(0, 2),
		ValidArgsFunction: completeType,
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.runHistory(cmd.Context(), args, f)
		},
	}
	cmd.Flags().StringVar(&f.scope, "scope", "", "only changes to this scope (default: every scope)")
	cmd.Flags().IntVar(&f.limit, "limit", 0, "show at most this many applies, the newest (0: every one kept)")
	return cmd
}

// historyEntry is one apply in history's output.
type historyEntry struct {
	ID string `json:"id"`
	// Revisions has one revision per transaction, in order.
	Revisions []int64   `json:"revisions"`
	Kind      string    `json:"kind"`
	By        string    `json:"by"`
	At        time.Time `json:"at"`
	Message   string    `json:"message,omitempty"`
	Changes   []change  `json:"changes"`
	Omitted   int       `json:"omitted,omitempty"`
	Undo      bool      `json:"undo"`
}

// historyFilter selects the changes history shows.
type historyFilter struct {
	typ   *resource.Type // nil: every type
	name  string
	scope string
}

func (h historyFilter) match(c store.HistoryChange) bool {
	return (h.typ == nil || c.Type == h.typ.Name) && (h.name == "" || c.Name == h.name) && (h.scope == "" || c.Scope == h.scope)
}

func (a *app) runHistory(ctx context.Context, args []string, f historyFlags) error {
	var filter historyFilter
	if len(args) > 0 {
		t, err := resource.Lookup(args[0])
		if err != nil {
			return err
		}
		filter.typ = t
	}
	if len(args) > 1 {
		filter.name = args[1]
	}
	if f.scope != "" {
		if err := resource.ValidateScope(f.scope); err != nil {
			return fmt.Errorf("--scope: %w", err)
		}
		filter.scope = f.scope
	}
	if f.limit < 0 {
		return fmt.Errorf("--limit %d: must not be negative (0: every apply kept)", f.limit)
	}
	ctx, cancel := a.commandContext(ctx)
	defer cancel()
	c, err := a.connect(ctx)
	if err != nil {
		return err
	}
	defer c.Close()
	records, err := a.readHistory(ctx, c)
	if err != nil {
		return err
	}
	entries := historyEntries(records, filter)
	if f.limit > 0 && len(entries) > f.limit {
		entries = entries[:f.limit]
	}
	if a.opts.Output != outputTable {
		return a.printStructured(entries)
	}
	return a.printHistoryTable(entries)
}

// readHistory reads every record of the history, warning about those
// that do not decode.
func (a *app) readHistory(ctx context.Context, c *conn) ([]store.HistoryRecord, error) {
	records, bad, err := c.store.History(ctx, 0)
	a.warnMalformed(bad)
	return records, err
}

// historyEntries groups records, newest first, by apply, keeping the
// changes filter matches and the applies with one.
func historyEntries(records []store.HistoryRecord, filter historyFilter) []historyEntry {
	var out []historyEntry
	at := map[string]int{} // apply id to its index in out
	for _, r := range records {
		i, ok := at[r.ID]
		if !ok {
			i = len(out)
			at[r.ID] = i
			out = append(out, historyEntry{ID: r.ID, Kind: r.Kind, By: r.By, At: r.At, Message: r.Message, Changes: []change{}, Undo: true})
		}
		e := &out[i]
		e.Revisions = append(e.Revisions, r.Revision)
		e.Omitted += r.Omitted
		e.Undo = e.Undo && r.Undo
		for _, c := range r.Changes {
			if filter.match(c) {
				e.Changes = append(e.Changes, change{Action: c.Action, Type: c.Type, Scope: c.Scope, Name: c.Name})
			}
		}
	}
	filtered := filter.typ != nil || filter.scope != ""
	kept := out[:0]
	for _, e := range out {
		slices.Sort(e.Revisions)
		if !filtered || len(e.Changes) > 0 {
			kept = append(kept, e)
		}
	}
	return kept
}

func (a *app) printHistoryTable(entries []historyEntry) error {
	if len(entries) == 0 {
		_, err := fmt.Fprintln(a.out, "no applies in the history")
		return err
	}
	w := newTable(a.out)
	row(w, "ID", "REVISION", "TIME", "BY", "KIND", "CHANGES", "MESSAGE")
	for _, e := range entries {
		rev := fmt.Sprint(e.Revisions[len(e.Revisions)-1])
		if len(e.Revisions) > 1 {
			rev = fmt.Sprintf("%d-%d", e.Revisions[0], e.Revisions[len(e.Revisions)-1])
		}
		row(w, e.ID, rev, e.At.UTC().Format(time.RFC3339), e.By, e.Kind, changesSummary(e), e.Message)
	}
	return w.Flush()
}

// changesSummary counts an entry's changes by action.
func changesSummary(e historyEntry) string {
	n := map[string]int{}
	for _, c := range e.Changes {
		n[c.Action]++
	}
	s := fmt.Sprintf("%d created, %d changed, %d deleted", n["created"], n["changed"], n["deleted"])
	if e.Omitted > 0 {
		s += fmt.Sprintf(" (and %d not recorded)", e.Omitted)
	}
	return s
}

// maxMessage bounds an apply's message (-m), in bytes.
const maxMessage = 1024

// checkMessage refuses a message that is too long, not UTF-8, or holds
// control characters (it is shown in a table).
func checkMessage(m string) error {
	switch {
	case len(m) > maxMessage:
		return fmt.Errorf("--message: %d bytes, more than %d", len(m), maxMessage)
	case !utf8.ValidString(m):
		return errors.New("--message: not valid UTF-8")
	case strings.IndexFunc(m, unicode.IsControl) >= 0:
		return errors.New("--message: holds a control character (a new line, a tab...): give one line")
	}
	return nil
}
