// Package chaos checks a run of Legation against etcd's own history: what
// the load tool's clients received (recorded by record.Writer from
// loadgen.Config.Recorder, read back by record.ReadEvents), what etcd held at
// every revision (recorded by HistoryRecorder from a watch of the prefix,
// read back by ReadHistory), and Check, which replays the history and
// reports every response that breaks a promise of the xDS servers. It
// does not inject faults nor run replicas.
package chaos
