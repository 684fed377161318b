// Package resource knows the Envoy resource types Legation serves: their
// short names, type URLs and push order, how to read a resource's name, how
// to validate one, and how to decode the YAML/JSON documents operators write.
//
// It owns no state and does no I/O. Storing resources is package store's
// job; serving them is ads's and delta's.
//
// The promises its comments cite by number are those of docs/concepts/design.md.
package resource
