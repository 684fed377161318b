package authz

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"slices"
	"strings"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/legation-io/legation/internal/state/keyspace"
)

// ErrMalformed is matched by the errors about values in etcd that are not
// valid rules.
var ErrMalformed = errors.New("authz: malformed rule")

// Dir returns the directory of the rules under prefix: "<prefix>authz/"
// (keyspace.Authz). It sits beside the resources' directory, which the
// view watches alone: a rule's change wakes no xDS stream.
func Dir(prefix string) string { return keyspace.Authz.Prefix(prefix) }

// Key returns the key of identity's rule: "<prefix>authz/" and the
// identity escaped as a URL path segment (url.PathEscape), so that an
// identity's '/' never reads as a directory.
func Key(prefix, identity string) string { return keyspace.Authz.Key(prefix, url.PathEscape(identity)) }

// checkPrefix checks an etcd key prefix as the rest of Legation takes it.
func checkPrefix(prefix string) error {
	if !strings.HasPrefix(prefix, "/") || !strings.HasSuffix(prefix, "/") {
		return fmt.Errorf("authz: prefix %q must start and end with '/'", prefix)
	}
	return nil
}

// Decode reads the rule stored at etcd key k under prefix. It fails, with
// an error matching ErrMalformed, when the value is not one JSON rule,
// when the rule is not valid, or when k is not the rule's own key.
func Decode(prefix, k string, value []byte) (Rule, error) {
	esc, ok := keyspace.Authz.Cut(prefix, k)
	if !ok {
		return Rule{}, fmt.Errorf("%w: key %q is not under %q", ErrMalformed, k, Dir(prefix))
	}
	var r Rule
	dec := json.NewDecoder(bytes.NewReader(value))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&r); err != nil {
		return Rule{}, fmt.Errorf("%w: key %q: %v", ErrMalformed, k, err)
	}
	if dec.More() {
		return Rule{}, fmt.Errorf("%w: key %q: more than one JSON value", ErrMalformed, k)
	}
	if err := r.Validate(); err != nil {
		// %w twice: ErrUntyped, when it is the fault, stays visible to
		// xdsadmin authz list and migrate.
		return Rule{}, fmt.Errorf("%w: key %q: %w", ErrMalformed, k, err)
	}
	if want := url.PathEscape(r.Identity); esc != want {
		return Rule{}, fmt.Errorf("%w: key %q holds the rule of identity %q, whose key ends in %q", ErrMalformed, k, r.Identity, want)
	}
	return r, nil
}

// encode returns the stored form of a valid rule.
func encode(r Rule) (string, error) {
	b, err := json.Marshal(r)
	if err != nil {
		return "", fmt.Errorf("authz: encode rule of %q: %w", r.Identity, err)
	}
	return string(b), nil
}

// Grant validates r and stores it under prefix, replacing any rule of the
// same identity. An invalid rule is not written.
func Grant(ctx context.Context, c *clientv3.Client, prefix string, r Rule) error {
	_, _, err := Replace(ctx, c, prefix, r)
	return err
}

// Replace is Grant that also returns the rule it replaced, if there was
// a valid one (replaced reports whether any value was there, valid or
// not).
func Replace(ctx context.Context, c *clientv3.Client, prefix string, r Rule) (prev Rule, replaced bool, err error) {
	if err := checkPrefix(prefix); err != nil {
		return Rule{}, false, err
	}
	if err := r.Validate(); err != nil {
		return Rule{}, false, fmt.Errorf("authz: %w", err)
	}
	v, err := encode(r)
	if err != nil {
		return Rule{}, false, err
	}
	k := Key(prefix, r.Identity)
	resp, err := c.Put(ctx, k, v, clientv3.WithPrevKV())
	if err != nil {
		return Rule{}, false, fmt.Errorf("authz: put %s: %w", k, err)
	}
	if resp.PrevKv == nil {
		return Rule{}, false, nil
	}
	prev, _ = Decode(prefix, k, resp.PrevKv.Value) // a malformed one is just gone
	return prev, true, nil
}

// Revoke deletes identity's rule under prefix and reports whether there
// was one. The identity is not validated, so that a rule whose identity
// no longer validates can be removed too.
func Revoke(ctx context.Context, c *clientv3.Client, prefix, identity string) (existed bool, err error) {
	if err := checkPrefix(prefix); err != nil {
		return false, err
	}
	if identity == "" {
		return false, errors.New("authz: identity: empty")
	}
	k := Key(prefix, identity)
	resp, err := c.Delete(ctx, k)
	if err != nil {
		return false, fmt.Errorf("authz: delete %s: %w", k, err)
	}
	return resp.Deleted > 0, nil
}

// List returns the valid rules stored under prefix, sorted by identity,
// read at one revision. Malformed values are left out (Read reports
// them).
func List(ctx context.Context, c *clientv3.Client, prefix string) ([]Rule, error) {
	rules, _, _, err := Read(ctx, c, prefix)
	return rules, err
}

// BadRule is a value under the rules' directory that is not a valid rule.
type BadRule struct {
	Key         string
	ModRevision int64
	// Err matches ErrMalformed.
	Err error
}

// Read returns the rules stored under prefix, sorted by identity, the
// values that are not valid rules, in key order, and the etcd revision
// they were read at.
func Read(ctx context.Context, c *clientv3.Client, prefix string) ([]Rule, []BadRule, int64, error) {
	if err := checkPrefix(prefix); err != nil {
		return nil, nil, 0, err
	}
	dir := Dir(prefix)
	resp, err := c.Get(ctx, dir, clientv3.WithPrefix())
	if err != nil {
		return nil, nil, 0, fmt.Errorf("authz: read %s: %w", dir, err)
	}
	var (
		rules []Rule
		bad   []BadRule
	)
	for _, kv := range resp.Kvs {
		r, err := Decode(prefix, string(kv.Key), kv.Value)
		if err != nil {
			bad = append(bad, BadRule{Key: string(kv.Key), ModRevision: kv.ModRevision, Err: err})
			continue
		}
		rules = append(rules, r)
	}
	slices.SortFunc(rules, func(a, b Rule) int { return strings.Compare(a.Identity, b.Identity) })
	return rules, bad, resp.Header.Revision, nil
}
