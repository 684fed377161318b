package limits_test

import (
	"testing"
	"time"

	"github.com/legation-io/legation/internal/xds/limits"
)

// TestBound: Max bounds at its value, NoBound bounds nothing, the zero
// Bound is unset and takes the default Or gives it, and a flag's 0 is no
// bound both ways (MaxOrNone, MaxOrZero).
func TestBound(t *testing.T) {
	for _, tc := range []struct {
		name      string
		b         limits.Bound[int]
		limit     int
		limited   bool
		allows10  bool
		allows11  bool
		orZero    int
		str       string
		unbounded bool
	}{
		{"Max(10)", limits.Max(10), 10, true, true, false, 10, "10", false},
		{"Max(0)", limits.Max(0), 0, true, false, false, 0, "0", false},
		{"NoBound", limits.NoBound[int](), 0, false, true, true, 0, "none", true},
		{"MaxOrNone(0)", limits.MaxOrNone(0), 0, false, true, true, 0, "none", true},
		{"MaxOrNone(10)", limits.MaxOrNone(10), 10, true, true, false, 10, "10", false},
		{"unset", limits.Bound[int]{}, 0, false, true, true, 0, "unset", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got, ok := tc.b.Limit(); got != tc.limit || ok != tc.limited {
				t.Errorf("Limit() = %d, %v; want %d, %v", got, ok, tc.limit, tc.limited)
			}
			if got := tc.b.Allows(10); got != tc.allows10 {
				t.Errorf("Allows(10) = %v, want %v", got, tc.allows10)
			}
			if got := tc.b.Allows(11); got != tc.allows11 {
				t.Errorf("Allows(11) = %v, want %v", got, tc.allows11)
			}
			if got := tc.b.MaxOrZero(); got != tc.orZero {
				t.Errorf("MaxOrZero() = %d, want %d", got, tc.orZero)
			}
			if got := tc.b.String(); got != tc.str {
				t.Errorf("String() = %q, want %q", got, tc.str)
			}
			if got := tc.b.Unbounded(); got != tc.unbounded {
				t.Errorf("Unbounded() = %v, want %v", got, tc.unbounded)
			}
		})
	}
}

// TestBoundOr: only an unset Bound takes the default; one set to no bound
// keeps it.
func TestBoundOr(t *testing.T) {
	def := limits.Max(30 * time.Second)
	if got := (limits.Bound[time.Duration]{}).Or(def); got != def {
		t.Errorf("unset.Or(30s) = %v, want 30s", got)
	}
	if got := limits.NoBound[time.Duration]().Or(def); !got.Unbounded() {
		t.Errorf("NoBound.Or(30s) = %v, want none", got)
	}
	if got := limits.Max(time.Second).Or(def); got != limits.Max(time.Second) {
		t.Errorf("Max(1s).Or(30s) = %v, want 1s", got)
	}
	if got := def.String(); got != "30s" {
		t.Errorf("String() = %q, want 30s", got)
	}
}

// TestBoundNegative: a negative bound is a mistake, not a convention.
func TestBoundNegative(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Error("Max(-1) did not panic")
		}
	}()
	limits.Max(-1)
}
