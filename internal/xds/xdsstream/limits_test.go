package xdsstream

import (
	"strings"
	"testing"
)

func TestTruncate(t *testing.T) {
	tests := []struct {
		msg     string
		max     int
		want    string
		wantCut bool
	}{
		{"short", 10, "short", false},
		{"exactly10!", 10, "exactly10!", false},
		{"0123456789abc", 10, "0123456789... [3 more bytes cut by --max-nack-message]", true},
		{"ééééé", 3, "é... [8 more bytes cut by --max-nack-message]", true}, // at a rune boundary
		{strings.Repeat("x", 100), -1, strings.Repeat("x", 100), false},
	}
	for _, tt := range tests {
		got, cut := truncate(tt.msg, tt.max)
		if got != tt.want || cut != tt.wantCut {
			t.Errorf("truncate(%q, %d) = %q, %v; want %q, %v", tt.msg, tt.max, got, cut, tt.want, tt.wantCut)
		}
	}
}
