package limits

import (
	"fmt"
	"unicode"
	"unicode/utf8"
)

// CheckNodeID checks that a node id is valid UTF-8 with no control
// characters (C0, DEL, C1):
// an id is shown to operators (xdsadmin's tables, logs, the console) and
// kept in etcd, and one carrying terminal escapes or a carriage return
// could rewrite what they see. The error names the character and where
// it is.
func CheckNodeID(id string) error {
	if !utf8.ValidString(id) {
		return fmt.Errorf("node.id: not valid UTF-8: a node id must be printable text")
	}
	for i, r := range id {
		if unicode.IsControl(r) {
			return fmt.Errorf("node.id: control character %U at byte %d: a node id must be printable text", r, i)
		}
	}
	return nil
}
