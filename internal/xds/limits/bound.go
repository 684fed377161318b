package limits

import (
	"fmt"
	"time"
)

// Bound is a config's bound on a count, a size or a time: the most a
// stream, a request or a send may take, or no bound at all. It is said
// with Max, NoBound or MaxOrNone; neither zero nor a sign means anything
// of its own.
//
// The zero Bound is unset: the config it is a field of puts its default
// there (Or). An unset Bound that is used anyway bounds nothing.
type Bound[N int | time.Duration] struct {
	max  N
	kind boundKind
}

type boundKind uint8

const (
	unset boundKind = iota
	bounded
	unbounded
)

// Max returns the bound of n: at most n. It panics if n is negative.
func Max[N int | time.Duration](n N) Bound[N] {
	if n < 0 {
		panic(fmt.Sprintf("limits: a bound of %v, negative", n))
	}
	return Bound[N]{max: n, kind: bounded}
}

// NoBound returns the Bound that bounds nothing.
func NoBound[N int | time.Duration]() Bound[N] {
	return Bound[N]{kind: unbounded}
}

// MaxOrNone returns the bound a flag's value v says, where the flag's 0
// means no bound (as the replica's --max-* and timeout flags do): NoBound
// for 0, else Max(v).
func MaxOrNone[N int | time.Duration](v N) Bound[N] {
	if v == 0 {
		return NoBound[N]()
	}
	return Max(v)
}

// Or returns b, or def when b is unset.
func (b Bound[N]) Or(def Bound[N]) Bound[N] {
	if b.kind == unset {
		return def
	}
	return b
}

// Limit returns the most allowed and true, or false when b bounds
// nothing.
func (b Bound[N]) Limit() (N, bool) { return b.max, b.kind == bounded }

// Unbounded reports whether b bounds nothing: NoBound, or unset.
func (b Bound[N]) Unbounded() bool { return b.kind != bounded }

// Allows reports whether v is within b: at most its max, or anything when
// b bounds nothing.
func (b Bound[N]) Allows(v N) bool { return b.kind != bounded || v <= b.max }

// MaxOrZero returns b's max, or 0 when it bounds nothing: the value of a
// flag whose 0 means no bound (MaxOrNone's inverse).
func (b Bound[N]) MaxOrZero() N {
	if b.kind != bounded {
		return 0
	}
	return b.max
}

// String returns the max ("1024", "30s"), "none" when b bounds nothing,
// or "unset".
func (b Bound[N]) String() string {
	switch b.kind {
	case bounded:
		return fmt.Sprint(b.max)
	case unbounded:
		return "none"
	}
	return "unset"
}
