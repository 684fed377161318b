package delta

import "testing"

func TestMatchDomain(t *testing.T) {
	tests := []struct {
		domain, host string
		rank         int
	}{
		{"a.example.com", "a.example.com", 4},
		{"*.example.com", "a.example.com", 3},
		{"*.example.com", ".example.com", 0},
		{"a.example.*", "a.example.org", 2},
		{"*", "anything", 1},
		{"b.example.com", "a.example.com", 0},
		{"*.example.com", "example.org", 0},
	}
	for _, tc := range tests {
		if got, _ := matchDomain(tc.domain, tc.host); got != tc.rank {
			t.Errorf("matchDomain(%q, %q) = %d, want %d", tc.domain, tc.host, got, tc.rank)
		}
	}
}
