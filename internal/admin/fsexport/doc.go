// Package fsexport writes what one node would receive over state-of-the-world
// ADS as files for Envoy's filesystem subscriptions (path_config_source):
// one DiscoveryResponse per resource type, in YAML, JSON or binary proto,
// each replaced atomically (written to a temporary file in the same
// directory, synced, then renamed over the old one, which Envoy sees as a
// move). It takes its responses from package sotw (sotw.Response), so a file
// holds exactly what a SotW stream of the node's group is sent at the
// same revision, and it follows a view.View to keep the files current,
// rewriting only the types whose content changed.
//
// It does not run the view, connect to etcd or parse command lines (package
// adminctl's export command does), and it does not rewrite the config
// sources inside resources (an eds_config naming ADS stays so).
package fsexport
