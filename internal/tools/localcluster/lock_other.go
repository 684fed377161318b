//go:build !unix

package localcluster

import "os"

// lockFile creates path; there are no clusters here to guard (New fails).
func lockFile(path string) (*os.File, error) { return os.Create(path) }

// lockFree: nothing is swept here.
func lockFree(string) bool { return false }
