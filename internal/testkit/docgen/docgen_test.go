package docgen

import "testing"

func TestFind(t *testing.T) {
	doc := []byte("# Page\n<!-- flags:begin -->\n| a |\n<!-- flags:end -->\nafter\n")
	from, to, err := Find(doc, "flags")
	if err != nil {
		t.Fatal(err)
	}
	if got := string(doc[from:to]); got != "| a |\n" {
		t.Errorf("region = %q, want %q", got, "| a |\n")
	}
	for _, bad := range []string{
		"# no markers\n",
		"<!-- flags:begin -->\n| a |\n",
		"<!-- flags:begin -->\n<!-- flags:end -->\n<!-- flags:begin -->\n<!-- flags:end -->\n",
	} {
		if _, _, err := Find([]byte(bad), "flags"); err == nil {
			t.Errorf("Find(%q) found a region", bad)
		}
	}
}

func TestDiff(t *testing.T) {
	if d := diff("a\nb\n", "a\nc\n"); d != "region line 2:\n  page: b\n  code: c\n" {
		t.Errorf("diff = %q", d)
	}
}
