package xdsstream

import (
	"strings"
	"testing"

	"github.com/legation-io/legation/internal/xds/limits"
)

func TestTruncate(t *testing.T) {
	tests := []struct {
		msg     string
		max     limits.Bound[int]
		want    string
		wantCut bool
	}{
		{"short", limits.Max(10), "short", false},
		{"exactly10!", limits.Max(10), "exactly10!", false},
		{"0123456789abc", limits.Max(10), "0123456789... [3 more bytes cut by --max-nack-message]", true},
		{"ééééé", limits.Max(3), "é... [8 more bytes cut by --max-nack-message]", true}, // at a rune boundary
		{strings.Repeat("x", 100), limits.NoBound[int](), strings.Repeat("x", 100), false},
	}
	for _, tt := range tests {
		got, cut := truncate(tt.msg, tt.max)
		if got != tt.want || cut != tt.wantCut {
			t.Errorf("truncate(%q, %v) = %q, %v; want %q, %v", tt.msg, tt.max, got, cut, tt.want, tt.wantCut)
		}
	}
}
