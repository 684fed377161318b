// Package canary judges canary rollouts from what the fleet reports: which
// connected nodes a rollout's selector picks, which of them were sent its
// change and ACKed it, which rejected it (Progress), and from that whether
// a rollout is to be promoted, aborted, or left to bake (Decide).
package canary
