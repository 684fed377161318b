// Package rollout keeps canary rollouts: a change written once, as an
// overlay scope that only the nodes a selector picks see, then promoted
// (one ordinary apply for everyone) or aborted (the overlay removed).
//
// A rollout is a record under the rollouts directory and its overlay,
// resources in scope "~rollout.<id>" under the resources directory, which
// the views load like any other. Both are written in one transaction, and
// rewritten in one when the rollout ends. Set says, for the rollouts
// running at one revision, which overlays a node sees (its scope.Chain);
// a Watcher gives a replica's streams the latest Set, to wake them, and
// the Set at the revision of the snapshot they answer from.
package rollout
