// Package record is the recording format of a chaos run: the events (a
// stream's start and end, each response received) the load tool's clients
// write through Writer, read back by ReadEvents, and BodyHash, the hash of
// a resource's bytes that both the recordings and the etcd history carry.
// It is a leaf of the tools: the load tool writes recordings with it
// without importing the checker (package chaos), which reads them.
package record
