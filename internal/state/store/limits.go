package store

import (
	"fmt"
	"sort"

	"github.com/legation-io/legation/internal/state/resource"
)

// opBytes estimates the bytes one write adds to a transaction request:
// key, value, and protobuf framing.
func (s *Store) opBytes(c Change) int {
	n := len(s.EtcdKey(c.Key)) + 32
	if c.New != nil {
		n += len(c.New.GetValue()) + len(c.New.GetTypeUrl()) + len(s.cfg.Writer) + 64
	}
	return n
}

// fixedBytes estimates the bytes of a transaction of plan besides its
// writes: the compares, and the marker puts (a marker's value is small).
func (s *Store) fixedBytes(plan *Plan) int {
	dirs, scopes := s.guards(plan)
	fixed := 0
	for _, d := range dirs {
		fixed += len(d) + 16
	}
	for _, sc := range scopes {
		fixed += 2*len(ApplyMarkerKey(s.cfg.Prefix, sc)) + len(s.cfg.Writer) + 96 + 72 // 72: a traceparent
	}
	return fixed
}

// chunk checks the limits and splits the plan's writes into transactions.
// etcd counts the larger of a transaction's compares and its operations
// against --max-txn-ops. Every transaction has one compare per guarded
// directory and one per scope (see guards), and writes, besides its
// changes, one apply marker per scope: unchanged resources cost nothing.
func (s *Store) chunk(plan *Plan, chunked bool, also *TxnAlso) ([][]Change, error) {
	var work []Change
	writes := map[string]bool{}
	for _, c := range plan.Changes {
		if c.Action != Unchanged {
			work = append(work, c)
			writes[c.Scope] = true
		}
	}
	dirs, scopes := s.guards(plan)
	ncmps := len(dirs) + len(scopes)
	fixed := s.fixedBytes(plan) + historyFixedBytes
	extraOps := 0
	if also != nil {
		if chunked {
			return nil, fmt.Errorf("%w: an apply written with other keys in its transaction cannot be chunked", ErrLimit)
		}
		ncmps += len(also.Cmps)
		fixed += also.Bytes
		extraOps = len(also.Ops)
	}
	if ncmps > s.cfg.MaxTxnOps {
		return nil, fmt.Errorf("%w: the apply needs %d compares in every transaction (one per type and scope it declares or prunes, and one per scope), more than etcd's --max-txn-ops (%d): split it by scope, or raise --max-txn-ops on every etcd member and pass the same value to xdsadmin --max-txn-ops",
			ErrLimit, ncmps, s.cfg.MaxTxnOps)
	}
	if !chunked {
		if err := s.fitsOne(work, len(writes)+extraOps, fixed); err != nil {
			return nil, err
		}
		return [][]Change{work}, nil
	}
	// Room for changes in each transaction, the markers and the history
	// aside.
	room := s.cfg.MaxTxnOps - len(scopes) - historyOps
	if room < 1 {
		return nil, fmt.Errorf("%w: the apply writes to %d scopes, which with the history's %d operations leaves no room for a change under etcd's --max-txn-ops (%d): split it by scope", ErrLimit, len(scopes), historyOps, s.cfg.MaxTxnOps)
	}
	return s.split(work, room, fixed)
}

// fitsOne checks that work, writing to the apply markers of scopes
// scopes, fits one transaction whose compares and markers take fixed
// bytes.
func (s *Store) fitsOne(work []Change, scopes, fixed int) error {
	nops := len(work) + scopes + historyOps
	total := fixed
	for _, c := range work {
		total += s.opBytes(c)
	}
	switch {
	case nops > s.cfg.MaxTxnOps:
		markers := "its scope's apply marker"
		if scopes > 1 {
			markers = fmt.Sprintf("%d scopes' apply markers", scopes)
		}
		markers += fmt.Sprintf(", %d for its history", historyOps)
		return fmt.Errorf("%w: the apply needs %d operations in one transaction (%d writes, %s), more than etcd's --max-txn-ops (%d): use --chunked to split it (clients may then see it in parts), or raise --max-txn-ops on every etcd member and pass the same value to xdsadmin --max-txn-ops",
			ErrLimit, nops, len(work), markers, s.cfg.MaxTxnOps)
	case total > s.cfg.MaxRequestBytes:
		return fmt.Errorf("%w: the apply needs a transaction of about %d bytes, more than etcd's --max-request-bytes (%d): use --chunked to split it (clients may then see it in parts), or raise --max-request-bytes on every etcd member and pass the same value to xdsadmin --max-request-bytes",
			ErrLimit, total, s.cfg.MaxRequestBytes)
	}
	return nil
}

// split splits work into transactions of at most room changes and
// --max-request-bytes, each of whose compares and markers take fixed
// bytes, in make-before-break order: the puts by type order, then the
// deletions, referring types first (resource.DeleteOrder).
func (s *Store) split(work []Change, room, fixed int) ([][]Change, error) {
	ordered := make([]Change, len(work))
	copy(ordered, work)
	rank := func(c Change) int {
		if c.Action == Delete {
			return 100 + resource.DeleteOrder(c.Type)
		}
		return c.Type.Order
	}
	sort.SliceStable(ordered, func(i, j int) bool { return rank(ordered[i]) < rank(ordered[j]) })
	var chunks [][]Change
	var cur []Change
	size := fixed
	for _, c := range ordered {
		b := s.opBytes(c)
		if fixed+b > s.cfg.MaxRequestBytes {
			return nil, fmt.Errorf("%w: %s alone needs about %d bytes, more than etcd's --max-request-bytes (%d)", ErrLimit, c.Key, fixed+b, s.cfg.MaxRequestBytes)
		}
		if len(cur) > 0 && (len(cur)+1 > room || size+b > s.cfg.MaxRequestBytes) {
			chunks = append(chunks, cur)
			cur, size = nil, fixed
		}
		cur = append(cur, c)
		size += b
	}
	return append(chunks, cur), nil
}
