package chaos

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"sort"
	"strings"
	"sync/atomic"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/legation-io/legation/internal/state/keyspace"
	"github.com/legation-io/legation/internal/state/resource"
	"github.com/legation-io/legation/internal/state/store"
	"github.com/legation-io/legation/internal/tools/chaos/record"
)

// History record kinds.
const (
	HistHeader = "header" // first line: the prefix and the start revision
	HistState  = "state"  // a key present at Rev (the start, or after a gap)
	HistPut    = "put"
	HistDelete = "delete"
	// HistProgress says nothing changed up to Rev.
	HistProgress = "progress"
	// HistGap says the watch was compacted: what happened in (From, Rev]
	// is unknown; the state at Rev follows as state records.
	HistGap = "gap"
)

// HistoryRecord is one line of a history file.
type HistoryRecord struct {
	Kind   string `json:"kind"`
	Rev    int64  `json:"rev"`
	Key    string `json:"key,omitempty"`
	Value  []byte `json:"value,omitempty"`
	Mod    int64  `json:"mod,omitempty"`
	From   int64  `json:"from,omitempty"`
	Prefix string `json:"prefix,omitempty"`
}

// HistoryRecorder writes every change under a Legation prefix's
// resources to a file, from the revision at which Run starts.
type HistoryRecorder struct {
	cli    *clientv3.Client
	prefix string // the resources directory: <prefix>resources/
	w      io.Writer
	ready  chan struct{}
	last   atomic.Int64 // the last revision written
	gaps   atomic.Int64

	// beforeWatch, when set (by tests), is called with the revision of
	// each state written, before the watch from it starts.
	beforeWatch func(rev int64)
}

// NewHistoryRecorder returns a recorder of prefix (a Legation etcd prefix,
// as "/legation/") through cli to w. It does no I/O.
func NewHistoryRecorder(cli *clientv3.Client, prefix string, w io.Writer) (*HistoryRecorder, error) {
	if cli == nil || w == nil {
		return nil, errors.New("chaos: history: needs an etcd client and a writer")
	}
	if !strings.HasSuffix(prefix, "/") {
		return nil, fmt.Errorf("chaos: history: prefix %q must end in /", prefix)
	}
	return &HistoryRecorder{cli: cli, prefix: keyspace.Resources.Prefix(prefix), w: w, ready: make(chan struct{})}, nil
}

// Ready is closed once the state at the start revision is written: start
// the run after it.
func (h *HistoryRecorder) Ready() <-chan struct{} { return h.ready }

// Last returns the last revision written (an event's, or a progress
// notification's, which says nothing changed up to it).
func (h *HistoryRecorder) Last() int64 { return h.last.Load() }

// Gaps returns the number of compactions of the recorder's own watch.
func (h *HistoryRecorder) Gaps() int64 { return h.gaps.Load() }

// Run records until ctx ends, then flushes; it returns nil then, or the
// error that stopped it. On a compaction of its watch it writes a gap and
// the state at the current revision, and watches on from there.
func (h *HistoryRecorder) Run(ctx context.Context) error {
	bw := bufio.NewWriterSize(h.w, 256<<10)
	enc := json.NewEncoder(bw)
	err := h.run(ctx, enc, bw)
	if ferr := bw.Flush(); err == nil && ferr != nil {
		err = fmt.Errorf("chaos: history: %w", ferr)
	}
	return err
}

// run writes the state at the start, then watches on, from the state
// at the current revision again after each compaction, until ctx ends.
func (h *HistoryRecorder) run(ctx context.Context, enc *json.Encoder, bw *bufio.Writer) error {
	rev, err := h.state(ctx, enc, HistoryRecord{Kind: HistHeader, Prefix: h.prefix})
	if err != nil {
		return err
	}
	if err := bw.Flush(); err != nil {
		return fmt.Errorf("chaos: history: %w", err)
	}
	close(h.ready)
	for {
		if h.beforeWatch != nil {
			h.beforeWatch(rev)
		}
		var compacted int64
		rev, compacted, err = h.watch(ctx, enc, rev)
		if err != nil {
			return err
		}
		if ctx.Err() != nil {
			return nil
		}
		if compacted == 0 {
			continue // the watch ended without a cause: watch again
		}
		h.gaps.Add(1)
		rev, err = h.state(ctx, enc, HistoryRecord{Kind: HistGap, From: rev})
		if err != nil {
			return err
		}
	}
}

// watch writes the changes after rev until the watch ends, and returns
// the last revision written and, if the watch ended on a compaction, the
// compaction's revision.
func (h *HistoryRecorder) watch(ctx context.Context, enc *json.Encoder, rev int64) (last, compacted int64, err error) {
	wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
	wch := h.cli.Watch(wctx, h.prefix, clientv3.WithPrefix(), clientv3.WithRev(rev+1), clientv3.WithProgressNotify())
	done := h.requestProgress(wctx)
	defer func() { cancel(); <-done }()
	for wr := range wch {
		if wr.CompactRevision != 0 {
			return rev, wr.CompactRevision, nil
		}
		if err := wr.Err(); err != nil {
			continue // the client retries; a fatal error closes wch
		}
		for _, e := range wr.Events {
			r := HistoryRecord{Kind: HistPut, Rev: e.Kv.ModRevision, Key: string(e.Kv.Key), Value: e.Kv.Value, Mod: e.Kv.ModRevision}
			if e.Type == clientv3.EventTypeDelete {
				r = HistoryRecord{Kind: HistDelete, Rev: e.Kv.ModRevision, Key: string(e.Kv.Key)}
			}
			if err := enc.Encode(&r); err != nil {
				return rev, 0, fmt.Errorf("chaos: history: %w", err)
			}
		}
		if wr.Header.Revision > rev {
			rev = wr.Header.Revision
			if err := enc.Encode(&HistoryRecord{Kind: HistProgress, Rev: rev}); err != nil {
				return rev, 0, fmt.Errorf("chaos: history: %w", err)
			}
			h.last.Store(rev)
		}
	}
	return rev, 0, nil
}

// requestProgress asks etcd every progressEvery, until wctx ends, to tell
// the watch its revision, so that the history reaches revisions written
// outside the resources. The returned channel is closed once it stopped.
func (h *HistoryRecorder) requestProgress(wctx context.Context) <-chan struct{} {
	done := make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(progressEvery)
		defer t.Stop()
		for {
			select {
			case <-wctx.Done():
				return
			case <-t.C:
				_ = h.cli.RequestProgress(wctx) // best effort: the next tick asks again
			}
		}
	}()
	return done
}

// state writes head (at the current revision) and every key present at
// it, and returns the revision.
func (h *HistoryRecorder) state(ctx context.Context, enc *json.Encoder, head HistoryRecord) (int64, error) {
	resp, err := h.cli.Get(ctx, h.prefix, clientv3.WithPrefix())
	if err != nil {
		if ctx.Err() != nil {
			return 0, nil
		}
		return 0, fmt.Errorf("chaos: history: read %s: %w", h.prefix, err)
	}
	rev := resp.Header.Revision
	head.Rev = rev
	if err := enc.Encode(&head); err != nil {
		return 0, fmt.Errorf("chaos: history: %w", err)
	}
	for _, kv := range resp.Kvs {
		if err := enc.Encode(&HistoryRecord{Kind: HistState, Rev: rev, Key: string(kv.Key), Value: kv.Value, Mod: kv.ModRevision}); err != nil {
			return 0, fmt.Errorf("chaos: history: %w", err)
		}
	}
	h.last.Store(rev)
	return rev, nil
}

// progressEvery is how often the recorder asks etcd for its watch's
// progress.
const progressEvery = 100 * time.Millisecond

// rkey names a resource in the model.
type rkey struct {
	typ, scope, name string // typ: the type's URL
}

// ver is a key's value from Rev on: present at mod revision Mod, or
// deleted.
type ver struct {
	rev, mod int64
	deleted  bool
	hash     string // record.BodyHash of the resource's bytes
}

// History is etcd's history of a run's resources as the checker reads
// it: what every key held at every revision in [Start, Last] outside the
// gaps.
type History struct {
	Start, Last int64
	// Gaps are the revision ranges (From, Rev] that are unknown.
	Gaps []HistoryRecord
	keys map[rkey][]ver // each in revision order
	// byType lists the keys of each type URL.
	byType map[string][]rkey
}

// ReadHistory reads a history file; errors name the line.
func ReadHistory(r io.Reader) (*History, error) {
	hr := &historyReader{h: &History{keys: map[rkey][]ver{}, byType: map[string][]rkey{}}}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), 64<<20)
	line := 0
	for sc.Scan() {
		line++
		if len(sc.Bytes()) == 0 {
			continue
		}
		var rec HistoryRecord
		if err := json.Unmarshal(sc.Bytes(), &rec); err != nil {
			return nil, fmt.Errorf("chaos: history line %d: %w", line, err)
		}
		if line == 1 {
			if rec.Kind != HistHeader || rec.Prefix == "" {
				return nil, fmt.Errorf("chaos: history line 1: want a header with the prefix")
			}
			hr.prefix, hr.h.Start, hr.h.Last = rec.Prefix, rec.Rev, rec.Rev
			continue
		}
		if err := hr.add(rec); err != nil {
			return nil, fmt.Errorf("chaos: history line %d: %w", line, err)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("chaos: history line %d: %w", line+1, err)
	}
	if line == 0 {
		return nil, errors.New("chaos: history: empty")
	}
	hr.endGap()
	for _, ks := range hr.h.byType {
		sort.Slice(ks, func(i, j int) bool { return ks[i].name < ks[j].name })
	}
	return hr.h, nil
}

// historyReader builds a History from a history file's records after
// its header.
type historyReader struct {
	h      *History
	prefix string // the header's
	// gapState is the keys written as state after a gap, until the next
	// record of another kind; gapRev the gap's revision.
	gapState map[rkey]bool
	gapRev   int64
}

// add adds one record to the history.
func (hr *historyReader) add(rec HistoryRecord) error {
	h := hr.h
	if rec.Rev < h.Last && rec.Kind != HistState {
		return fmt.Errorf("revision %d before %d", rec.Rev, h.Last)
	}
	if rec.Kind != HistState {
		hr.endGap()
	}
	h.Last = max(h.Last, rec.Rev)
	switch rec.Kind {
	case HistGap:
		h.Gaps = append(h.Gaps, rec)
		hr.gapState, hr.gapRev = map[rkey]bool{}, rec.Rev
		return nil
	case HistProgress:
		return nil
	case HistState, HistPut, HistDelete:
	default:
		return fmt.Errorf("kind %q: want state, put, delete, progress or gap", rec.Kind)
	}
	p, ok := strings.CutPrefix(rec.Key, hr.prefix)
	if !ok {
		return fmt.Errorf("key %q is not under %q", rec.Key, hr.prefix)
	}
	k, hash, err := keyOf(p, rec)
	if err != nil {
		return err
	}
	if hr.gapState != nil {
		hr.gapState[k] = true
	}
	if _, seen := h.keys[k]; !seen {
		h.byType[k.typ] = append(h.byType[k.typ], k)
	}
	h.keys[k] = append(h.keys[k], ver{rev: rec.Rev, mod: rec.Mod, deleted: rec.Kind == HistDelete, hash: hash})
	return nil
}

// endGap ends the state written after a gap: the keys it did not hold
// were deleted in the gap.
func (hr *historyReader) endGap() {
	if hr.gapState == nil {
		return
	}
	for k, vs := range hr.h.keys {
		if !hr.gapState[k] && !vs[len(vs)-1].deleted {
			hr.h.keys[k] = append(vs, ver{rev: hr.gapRev, deleted: true})
		}
	}
	hr.gapState = nil
}

// ReadHistoryFile reads the history file at path.
func ReadHistoryFile(path string) (*History, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("chaos: %w", err)
	}
	defer f.Close()
	h, err := ReadHistory(f)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return h, nil
}

// keyOf decodes a resource path with the store's key layout and, for a
// put, its envelope, whose body's bytes it hashes.
func keyOf(p string, rec HistoryRecord) (rkey, string, error) {
	if rec.Kind == HistDelete {
		typ, rest, _ := strings.Cut(p, "/")
		scope, name, ok := strings.Cut(rest, "/")
		t, found := resource.ByName(typ)
		if !ok || !found || name == "" {
			return rkey{}, "", fmt.Errorf("key %q: not type/scope/name", p)
		}
		return rkey{typ: t.URL, scope: scope, name: name}, "", nil
	}
	k, env, err := store.DecodeValue(p, rec.Value)
	if err != nil {
		return rkey{}, "", err
	}
	return rkey{typ: k.Type.URL, scope: k.Scope, name: k.Name}, record.BodyHash(env.GetBody().GetValue()), nil
}

// Known reports whether the state at rev is known: within [Start, Last]
// and outside every gap.
func (h *History) Known(rev int64) bool {
	if rev < h.Start || rev > h.Last {
		return false
	}
	for _, g := range h.Gaps {
		if rev > g.From && rev < g.Rev {
			return false
		}
	}
	return true
}

// at returns k's value at rev: its mod revision, or 0 when absent, and
// the revision of the delete that made it absent (0 when it never was).
func (h *History) at(k rkey, rev int64) (mod, deletedAt int64) {
	v, d := h.atVer(k, rev)
	return v.mod, d
}

// atVer is at with the value's hash.
func (h *History) atVer(k rkey, rev int64) (ver, int64) {
	vs := h.keys[k]
	i := sort.Search(len(vs), func(i int) bool { return vs[i].rev > rev }) - 1
	if i < 0 {
		return ver{}, 0
	}
	if vs[i].deleted {
		return ver{}, vs[i].rev
	}
	return vs[i], 0
}

// A chain is the scopes a node sees, most specific first, the default
// scope last: its group's, and the overlays of the canary rollouts that
// pick it (an overlay's keys exist only while its rollout runs).
type chain []string

// chainOf is the chain of a node of group that the rollouts with overlay
// scopes overlays (over the default scope) pick.
func chainOf(group string, overlays []string) chain {
	var c chain
	if group != "" {
		c = append(c, group)
	}
	c = append(c, overlays...)
	return append(c, store.DefaultScope)
}

// has reports whether scope is in c.
func (c chain) has(scope string) bool { return slices.Contains(c, scope) }

// Visible returns what a node of group sees of (type URL, name) at rev:
// the group's resource, else the default scope's; mod 0 when neither
// exists (deletedAt: when the last of them went).
func (h *History) Visible(typ, group, name string, rev int64) (mod, deletedAt int64) {
	v, d := h.visible(typ, chainOf(group, nil), name, rev)
	return v.mod, d
}

// visible is what a node of chain c sees of (type URL, name) at rev,
// with the value's hash: the most specific scope's resource.
func (h *History) visible(typ string, c chain, name string, rev int64) (v ver, deletedAt int64) {
	for _, scope := range c {
		v, d := h.atVer(rkey{typ, scope, name}, rev)
		if v.mod != 0 {
			return v, 0
		}
		deletedAt = max(deletedAt, d)
	}
	return ver{}, deletedAt
}

// Set returns what a node of group sees of a type at rev: name to mod
// revision.
func (h *History) Set(typ, group string, rev int64) map[string]int64 {
	return h.set(typ, chainOf(group, nil), rev)
}

// set is Set for a node of chain c.
func (h *History) set(typ string, c chain, rev int64) map[string]int64 {
	out := map[string]int64{}
	for _, k := range h.byType[typ] {
		if !c.has(k.scope) {
			continue
		}
		if _, done := out[k.name]; done {
			continue
		}
		if v, _ := h.visible(typ, c, k.name, rev); v.mod != 0 {
			out[k.name] = v.mod
		}
	}
	return out
}

// existedAfter reports whether a node of chain c sees name at some
// revision in (from, to].
func (h *History) existedAfter(typ string, c chain, name string, from, to int64) bool {
	for _, scope := range c {
		vs := h.keys[rkey{typ, scope, name}]
		for _, v := range vs {
			if v.rev > from && v.rev <= to && !v.deleted {
				return true
			}
		}
		if m, _ := h.at(rkey{typ, scope, name}, from); m != 0 {
			return true
		}
	}
	return false
}
