package store

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/legation-io/legation/internal/state/resource"
	legationv1 "github.com/legation-io/legation/proto/legation/v1"
)

// Resource is a stored resource as read from etcd.
type Resource struct {
	Key
	Envelope       *legationv1.Envelope
	CreateRevision int64
	ModRevision    int64
	// Lease is the etcd lease attached to the key, 0 for none.
	Lease int64
}

// Malformed is a key whose value could not be decoded.
type Malformed struct {
	EtcdKey     string
	ModRevision int64
	Err         error
}

// ListOptions selects what List returns.
type ListOptions struct {
	// Type limits the list to one type; nil lists every type.
	Type *resource.Type
	// Scope limits the list to one scope; empty lists every scope. It
	// needs Type.
	Scope string
	// Revision reads at a past revision; zero reads now.
	Revision int64
}

// ListResult is what List returns.
type ListResult struct {
	// Revision is the etcd revision the list was read at.
	Revision  int64
	Resources []*Resource
	// Malformed are the values that did not decode; they are not in
	// Resources.
	Malformed []Malformed
}

func (s *Store) listPrefix(o ListOptions) (string, error) {
	switch {
	case o.Type == nil && o.Scope != "":
		return "", errors.New("store: a scope needs a type")
	case o.Type == nil:
		return s.root, nil
	case o.Scope == "":
		return s.root + o.Type.Name + "/", nil
	}
	if err := resource.ValidateStoredScope(o.Scope); err != nil {
		return "", fmt.Errorf("store: %w", err)
	}
	return s.root + o.Type.Name + "/" + o.Scope + "/", nil
}

// List reads resources at one revision with a paginated range, in key
// order.
func (s *Store) List(ctx context.Context, o ListOptions) (*ListResult, error) {
	prefix, err := s.listPrefix(o)
	if err != nil {
		return nil, err
	}
	res := &ListResult{Revision: o.Revision}
	err = s.rangeAll(ctx, prefix, o.Revision, func(rev int64) { res.Revision = rev }, func(kv *mvccpb.KeyValue) {
		r, err := s.decode(kv)
		if err != nil {
			res.Malformed = append(res.Malformed, Malformed{EtcdKey: string(kv.Key), ModRevision: kv.ModRevision, Err: err})
			return
		}
		res.Resources = append(res.Resources, r)
	})
	if err != nil {
		return nil, err
	}
	return res, nil
}

// rangeAll reads every key under prefix at one revision (rev, or the
// current one when zero), page by page (ReadPagesAt). atRev is called
// once with the revision read at, before the first key.
func (s *Store) rangeAll(ctx context.Context, prefix string, rev int64, atRev func(int64), each func(*mvccpb.KeyValue)) error {
	if err := ReadPagesAt(ctx, s.kv, prefix, rev, s.cfg.PageSize, atRev, each); err != nil {
		return s.wrapErr("range "+prefix, err)
	}
	return nil
}

// Get reads one resource, now (rev 0) or at a past revision.
func (s *Store) Get(ctx context.Context, k Key, rev int64) (*Resource, int64, error) {
	var opts []clientv3.OpOption
	if rev > 0 {
		opts = append(opts, clientv3.WithRev(rev))
	}
	resp, err := s.kv.Get(ctx, s.EtcdKey(k), opts...)
	if err != nil {
		return nil, 0, s.wrapErr("get "+k.String(), err)
	}
	if len(resp.Kvs) == 0 {
		return nil, resp.Header.Revision, fmt.Errorf("%w: %s", ErrNotFound, k)
	}
	r, err := s.decode(resp.Kvs[0])
	return r, resp.Header.Revision, err
}

func (s *Store) decode(kv *mvccpb.KeyValue) (*Resource, error) {
	p, ok := strings.CutPrefix(string(kv.Key), s.root)
	if !ok {
		return nil, fmt.Errorf("%w: key %q is outside %s", ErrMalformed, kv.Key, s.root)
	}
	k, env, err := DecodeValue(p, kv.Value)
	if err != nil {
		return nil, err
	}
	return &Resource{Key: k, Envelope: env, CreateRevision: kv.CreateRevision, ModRevision: kv.ModRevision, Lease: kv.Lease}, nil
}
