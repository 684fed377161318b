package limits_test

import (
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/legation-io/legation/internal/xds/limits"
)

func TestCheckNodeID(t *testing.T) {
	for _, id := range []string{"sidecar~10.0.0.1~pod.ns~ns.svc.cluster.local", "édge-1", "a b", "日本", ""} {
		if err := limits.CheckNodeID(id); err != nil {
			t.Errorf("CheckNodeID(%q): %v, want nil", id, err)
		}
	}
	for id, want := range map[string]string{
		"evil\x1b[31m": "U+001B at byte 4",
		"a\rb":         "U+000D at byte 1",
		"\x00":         "U+0000 at byte 0",
		"x\x7f":        "U+007F at byte 1",
		"é\u0085":      "U+0085 at byte 2",
		"tab\there":    "U+0009 at byte 3",
		"line\nfeed":   "U+000A at byte 4",
	} {
		err := limits.CheckNodeID(id)
		if err == nil || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), "printable text") {
			t.Errorf("CheckNodeID(%q): %v, want an error naming %s", id, err, want)
		}
	}
}

func FuzzCheckNodeID(f *testing.F) {
	f.Add("node-1")
	f.Add("a\x1bb")
	f.Fuzz(func(t *testing.T, id string) {
		err := limits.CheckNodeID(id)
		hasControl := !utf8.ValidString(id) || strings.ContainsFunc(id, func(r rune) bool { return r < 0x20 || (r >= 0x7f && r < 0xa0) })
		if (err != nil) != hasControl {
			t.Errorf("CheckNodeID(%q) = %v; control characters: %v", id, err, hasControl)
		}
	})
}
