package scope

import (
	"strings"

	"github.com/legation-io/legation/internal/state/store"
)

const defaultScope = store.DefaultScope

// A Chain is the scopes a node sees, in the order a name is looked up:
// the canary overlays of the rollouts that select it over its group, its
// group, the overlays over the default scope, then the default scope. A
// node in no rollout has the chain of its group alone, which is the
// group's name itself (Of), so that what keys on a node's view (the
// shared response bodies, the interned holdings) keys on its chain: a
// canary node never shares a body with a node outside its canary.
//
// It is a string so that it compares and keys maps cheaply; scope names
// hold no control characters (resource.ValidateScope), so the separators
// of a layered chain cannot occur in them.
type Chain string

// Separators of a layered chain: group, then '\x00' and the overlays over
// the group, then '\x00' and those over the default scope, each list
// separated by '\x01'.
const (
	sepPart    = "\x00"
	sepOverlay = "\x01"
)

// Of is the chain of a node of group that no rollout selects ("" for the
// default scope alone).
func Of(group string) Chain { return Chain(group) }

// Layered is the chain of a node of group that sees the overlays
// overGroup over its group's resources and overDefault over the default
// scope's. With no overlay it is Of(group).
func Layered(group string, overGroup, overDefault []string) Chain {
	if len(overGroup) == 0 && len(overDefault) == 0 {
		return Of(group)
	}
	return Chain(group + sepPart + strings.Join(overGroup, sepOverlay) + sepPart + strings.Join(overDefault, sepOverlay))
}

// Group is the node's group.
func (c Chain) Group() string {
	g, _, _ := strings.Cut(string(c), sepPart)
	return g
}

// Layered reports whether the chain holds an overlay.
func (c Chain) Layered() bool { return strings.Contains(string(c), sepPart) }

// Each calls fn for each scope of the chain, most specific first, the
// default scope last, until fn returns false.
func (c Chain) Each(fn func(scope string) bool) {
	if !c.Layered() {
		if c != "" && !fn(string(c)) {
			return
		}
		fn(defaultScope)
		return
	}
	group, rest, _ := strings.Cut(string(c), sepPart)
	overGroup, overDefault, _ := strings.Cut(rest, sepPart)
	if !eachOverlay(overGroup, fn) || (group != "" && !fn(group)) || !eachOverlay(overDefault, fn) {
		return
	}
	fn(defaultScope)
}

// eachOverlay calls fn for each overlay of a '\x01'-separated list; false
// when fn did.
func eachOverlay(list string, fn func(string) bool) bool {
	for list != "" {
		var o string
		o, list, _ = strings.Cut(list, sepOverlay)
		if !fn(o) {
			return false
		}
	}
	return true
}

// Has reports whether scope is in the chain.
func (c Chain) Has(scope string) bool {
	found := false
	c.Each(func(s string) bool {
		found = s == scope
		return !found
	})
	return found
}

// Scopes lists the chain's scopes, most specific first.
func (c Chain) Scopes() []string {
	var out []string
	c.Each(func(s string) bool {
		out = append(out, s)
		return true
	})
	return out
}
