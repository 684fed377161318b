package store

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/protobuf/proto"

	"github.com/legation-io/legation/internal/state/keyspace"
)

// The history: every transaction of an apply puts a record of what it
// changed (HistoryRecord) under keyspace.History, in the same
// transaction, so a record exists exactly when its changes were written,
// at the same revision. A record keeps each changed or deleted
// resource's body from before the change, so that the apply can be
// undone after etcd has compacted the revisions before it. The last
// Config.HistoryKeep records are kept: each transaction deletes the
// older ones (one range delete).

// DefaultHistoryKeep is how many history records are kept when
// Config.HistoryKeep is zero.
const DefaultHistoryKeep = 100

// historyRecordBytes bounds one history record: beyond it the record
// drops the bodies from before (then the apply cannot be undone once
// etcd compacted its revision), then the changes past what fits (then it
// counts them in Omitted). It is also bounded by the room the
// transaction leaves under --max-request-bytes.
const historyRecordBytes = 256 << 10

// historyOps is the operations a transaction's history takes: its
// record, and the range delete of the records past HistoryKeep.
const historyOps = 2

// historyFixedBytes is the least room a transaction leaves its history:
// a record without changes, and the range delete.
const historyFixedBytes = 1024

// The kinds of writes a history record tells apart: an apply, a delete
// (KindRollback is in undo.go), and a canary rollout's three steps: it
// began (its overlay written), was promoted (its resources applied for
// everyone), was aborted (its overlay removed).
const (
	KindApply   = "apply"
	KindDelete  = "delete"
	KindRollout = "rollout"
	KindPromote = "promote"
	KindAbort   = "abort"
)

// HistoryRecord is one transaction of an apply, as the history keeps it
// (JSON, the value of its key).
type HistoryRecord struct {
	// ID names the apply; its transactions share it (Part of Parts).
	ID    string `json:"id"`
	Part  int    `json:"part"`
	Parts int    `json:"parts"`
	// Kind is KindApply, KindDelete, KindRollback, or a rollout's step
	// (ApplyOptions.Kind).
	Kind string `json:"kind"`
	// By is the writer (Config.Writer), At when the apply was sent.
	By string    `json:"by"`
	At time.Time `json:"at"`
	// Message is the apply's message (ApplyOptions.Message).
	Message     string `json:"message,omitempty"`
	Traceparent string `json:"traceparent,omitempty"`
	// Changes is what the transaction created, changed and deleted, in
	// key order; Omitted counts the changes the record had no room for.
	Changes []HistoryChange `json:"changes"`
	Omitted int             `json:"omitted,omitempty"`
	// Undo is true when every change listed keeps the body from before
	// it (Before), so the transaction can be undone without etcd's
	// history.
	Undo bool `json:"undo"`
	// Revision is the revision the transaction wrote: the record's own
	// mod revision, filled in when it is read (not stored).
	Revision int64 `json:"-"`
}

// HistoryChange is one resource a history record changed.
type HistoryChange struct {
	Type   string `json:"type"` // the resource type's name
	Scope  string `json:"scope"`
	Name   string `json:"name"`
	Action string `json:"action"` // created, changed or deleted
	// Before is the body before the change, a google.protobuf.Any in
	// protobuf; empty for a creation, or when the record had no room.
	Before []byte `json:"before,omitempty"`
	// BeforeRevision is the mod revision of the resource before the
	// change; 0 for a creation.
	BeforeRevision int64 `json:"before_revision,omitempty"`
}

// historyKey is the key of part part of apply id: parts sort in order,
// and applies by time (the id starts with it).
func historyKey(prefix, id string, part int) string {
	return keyspace.History.Key(prefix, fmt.Sprintf("%s/%04d", id, part))
}

// NewApplyID names an apply sent at at: its time to the microsecond,
// then 6 random hex digits, "20261128-140312.512345-3f2a9c".
func NewApplyID(at time.Time) string {
	var b [3]byte
	rand.Read(b[:]) // never fails (crypto/rand)
	return at.UTC().Format("20060102-150405.000000") + "-" + hex.EncodeToString(b[:])
}

// historyRecord is the record of one transaction writing changes, at most
// room bytes once encoded.
func (s *Store) historyRecord(h HistoryRecord, changes []Change, room int) ([]byte, error) {
	h.Undo = true
	for _, c := range changes {
		if c.Action == Unchanged {
			continue
		}
		hc := HistoryChange{Type: c.Type.Name, Scope: c.Scope, Name: c.Name, Action: c.Action.String()}
		if c.Old != nil && c.Old.Envelope != nil {
			b, err := proto.MarshalOptions{Deterministic: true}.Marshal(c.Old.Envelope.GetBody())
			if err != nil {
				return nil, fmt.Errorf("store: encode history: %w", err)
			}
			hc.Before, hc.BeforeRevision = b, c.Old.ModRevision
		}
		h.Changes = append(h.Changes, hc)
	}
	b, err := json.Marshal(h)
	if err != nil || len(b) <= room {
		return b, err
	}
	// Without the bodies, then without the changes past the room.
	h.Undo = false
	for i := range h.Changes {
		h.Changes[i].Before = nil
	}
	for {
		if b, err = json.Marshal(h); err != nil || len(b) <= room || len(h.Changes) == 0 {
			return b, err
		}
		drop := max(1, len(h.Changes)*(len(b)-room)/len(b)+1)
		drop = min(drop, len(h.Changes))
		h.Omitted += drop
		h.Changes = h.Changes[:len(h.Changes)-drop]
	}
}

// historyOps are the operations of a transaction's history: the put of
// its record, and the range delete of the records older than the
// HistoryKeep-1 newest (the record put makes HistoryKeep).
func (s *Store) historyOps(ctx context.Context, key string, record []byte) ([]clientv3.Op, error) {
	ops := []clientv3.Op{clientv3.OpPut(key, string(record))}
	dir := keyspace.History.Prefix(s.cfg.Prefix)
	keep := int64(s.cfg.HistoryKeep)
	resp, err := s.kv.Get(ctx, dir, clientv3.WithPrefix(), clientv3.WithKeysOnly(),
		clientv3.WithSort(clientv3.SortByKey, clientv3.SortDescend), clientv3.WithLimit(keep))
	if err != nil {
		return nil, s.wrapErr("read history", err)
	}
	if resp.Count >= keep && len(resp.Kvs) > 0 {
		// Everything before the keep-th newest goes, that one too: with
		// the record put, keep remain.
		oldestKept := string(resp.Kvs[len(resp.Kvs)-1].Key)
		ops = append(ops, clientv3.OpDelete(dir, clientv3.WithRange(oldestKept+"\x00")))
	}
	return ops, nil
}

// History returns the history's records, newest first, at most limit of
// them (0: all), each with the revision it wrote, and the records that
// do not decode (written by another tool), which it skips.
func (s *Store) History(ctx context.Context, limit int) ([]HistoryRecord, []Malformed, error) {
	h, bad, err := ReadHistory(ctx, s.kv, s.cfg.Prefix, limit)
	if err != nil {
		return nil, nil, s.wrapErr("read history", err)
	}
	return h, bad, nil
}

// ReadHistory reads the history under prefix as Store.History does, for
// readers without a Store (a replica's /debug/nacks).
func ReadHistory(ctx context.Context, kv clientv3.KV, prefix string, limit int) ([]HistoryRecord, []Malformed, error) {
	h, bad, _, err := ReadHistoryRev(ctx, kv, prefix, limit)
	return h, bad, err
}

// ReadHistoryRev is ReadHistory, with the etcd revision it read at: the
// records hold every apply written up to it, but those past limit.
func ReadHistoryRev(ctx context.Context, kv clientv3.KV, prefix string, limit int) ([]HistoryRecord, []Malformed, int64, error) {
	dir := keyspace.History.Prefix(prefix)
	opts := []clientv3.OpOption{clientv3.WithPrefix(), clientv3.WithSort(clientv3.SortByKey, clientv3.SortDescend)}
	if limit > 0 {
		opts = append(opts, clientv3.WithLimit(int64(limit)))
	}
	resp, err := kv.Get(ctx, dir, opts...)
	if err != nil {
		return nil, nil, 0, err
	}
	out := make([]HistoryRecord, 0, len(resp.Kvs))
	var bad []Malformed
	for _, kv := range resp.Kvs {
		h, err := ParseHistoryRecord(kv.Value)
		if err != nil {
			bad = append(bad, Malformed{EtcdKey: string(kv.Key), ModRevision: kv.ModRevision, Err: err})
			continue
		}
		h.Revision = kv.ModRevision
		out = append(out, h)
	}
	return out, bad, resp.Header.GetRevision(), nil
}

// ParseHistoryRecord decodes a history record's value, and checks what
// readers rely on: an id, a part within its parts, a known kind, and
// changes naming a type, scope, name and action.
func ParseHistoryRecord(b []byte) (HistoryRecord, error) {
	var h HistoryRecord
	if err := json.Unmarshal(b, &h); err != nil {
		return HistoryRecord{}, fmt.Errorf("%w: history record: %v", ErrMalformed, err)
	}
	switch {
	case h.ID == "":
		return HistoryRecord{}, fmt.Errorf("%w: history record: no id", ErrMalformed)
	case h.Part < 1 || h.Part > h.Parts:
		return HistoryRecord{}, fmt.Errorf("%w: history record %s: part %d of %d", ErrMalformed, h.ID, h.Part, h.Parts)
	case !knownKind(h.Kind):
		return HistoryRecord{}, fmt.Errorf("%w: history record %s: kind %q", ErrMalformed, h.ID, h.Kind)
	}
	for _, c := range h.Changes {
		if c.Type == "" || c.Scope == "" || c.Name == "" || c.Action == "" {
			return HistoryRecord{}, fmt.Errorf("%w: history record %s: a change without its type, scope, name or action", ErrMalformed, h.ID)
		}
	}
	return h, nil
}

// knownKind reports whether kind is one of a history record's kinds.
func knownKind(kind string) bool {
	switch kind {
	case KindApply, KindDelete, KindRollback, KindRollout, KindPromote, KindAbort:
		return true
	}
	return false
}
