// Package scope decides what a node sees: its group (from its Node message
// and --group-by) and, in a view snapshot, the default scope's resources
// overridden by its group's. It also says whether what a node would receive
// changed since a version. The SotW (ads) and delta servers share it; it
// owns no state.
package scope
