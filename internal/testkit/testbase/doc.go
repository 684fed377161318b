// Package testbase holds the few helpers every test of Legation shares: a
// context bounded by a timeout, free loopback addresses, a goroutine-safe
// buffer to capture logs, test loggers (kept and printed when the test fails, or written to the
// test's log as they come), and a freeze of the whole test process (Freeze).
//
// It is a leaf: it imports only the standard library, so that any test,
// including a package's internal tests and the other test kits, may
// import it without a cycle. Only tests and test kits import it.
package testbase
